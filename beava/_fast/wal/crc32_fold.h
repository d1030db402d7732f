/* CRC-32 of zlib (reflected polynomial 0xEDB88320) folded 16 bytes at a time with carry-less
 * multiplication (x86-64 PCLMULQDQ), for wal_record.pyx. The method is the one Intel's
 * white paper "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ Instruction"
 * describes: the 128-bit remainder is folded over each next 16 bytes with two products by
 * constants x^(128+32) and x^(128-32) mod P, then reduced to 64 and 32 bits and finished by
 * a Barrett reduction. The constants are those of that method for this polynomial, in
 * bit-reflected form. */
#ifndef BEAVA_CRC32_FOLD_H
#define BEAVA_CRC32_FOLD_H

#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define BEAVA_FOLD_ATTR __attribute__((target("pclmul,sse4.1")))

/* Whether this CPU multiplies without carries (checked once per process). */
static int beava_crc32_can_fold(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
}

/* The CRC register (not inverted at either end) after ``n`` bytes at ``p``: n a multiple
 * of 16, at least 16. */
BEAVA_FOLD_ATTR static uint32_t beava_crc32_fold(uint32_t reg, const uint8_t* p, size_t n) {
    const __m128i fold16 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
    const __m128i fold32 = _mm_set_epi64x(0, 0x163cd6124LL);
    const __m128i barrett = _mm_set_epi64x(0x1f7011641LL, 0x1db710641LL);
    const __m128i low32 = _mm_set_epi32(0, 0, 0, -1);
    __m128i x = _mm_xor_si128(_mm_loadu_si128((const __m128i*)p),
                              _mm_cvtsi32_si128((int)reg));
    __m128i t;
    p += 16;
    n -= 16;
    while (n >= 16) {
        t = _mm_xor_si128(_mm_clmulepi64_si128(x, fold16, 0x00),
                          _mm_clmulepi64_si128(x, fold16, 0x11));
        x = _mm_xor_si128(t, _mm_loadu_si128((const __m128i*)p));
        p += 16;
        n -= 16;
    }
    /* 128 -> 64 bits (with 32 zero bits appended), then -> 32 bits */
    t = _mm_clmulepi64_si128(x, fold16, 0x10);
    x = _mm_xor_si128(_mm_srli_si128(x, 8), t);
    t = _mm_clmulepi64_si128(_mm_and_si128(x, low32), fold32, 0x00);
    x = _mm_xor_si128(_mm_srli_si128(x, 4), t);
    /* Barrett reduction */
    t = _mm_clmulepi64_si128(_mm_and_si128(x, low32), barrett, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, low32), barrett, 0x00);
    x = _mm_xor_si128(x, t);
    return (uint32_t)_mm_extract_epi32(x, 1);
}

#else

static int beava_crc32_can_fold(void) { return 0; }

static uint32_t beava_crc32_fold(uint32_t reg, const uint8_t* p, size_t n) {
    (void)p;
    (void)n;
    return reg;  /* never called: beava_crc32_can_fold() is 0 */
}

#endif
#endif
