"""bench's record of the machine (bench/machine.py) and its reading of a perf profile
(bench/server_profile.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import machine, server_profile

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13
cache size\t: 512 KB
"""


def test_cpu_model_is_the_model_name_line() -> None:
    assert machine.cpu_model(CPUINFO) == "AMD EPYC 7B13"
    assert machine.cpu_model("processor : 0\n") == "?"


def test_caches_are_read_from_sysfs_by_level(tmp_path: Path) -> None:
    for index, (level, kind, size) in enumerate([(2, "Unified", "512K"), (1, "Data", "32K"),
                                                 (1, "Instruction", "32K")]):
        d = tmp_path / f"index{index}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
        (d / "shared_cpu_list").write_text("0\n")
    found = machine.caches(tmp_path)
    assert [c.label for c in found] == ["L1d 32K", "L1i 32K", "L2 512K"]
    host = machine.Machine("AMD EPYC 7B13", 2, found)
    assert host.summary() == "AMD EPYC 7B13, 2 CPUs, L1d 32K, L1i 32K, L2 512K"
    assert host.as_json()["caches"][2] == {"level": 2, "kind": "Unified", "size": "512K",
                                           "shared_cpus": "0"}


REPORT = """# To display the perf.data header info, please use --header/--header-only options.
#
# Samples: 12K of event 'cpu-clock:pppH'
# Event count (approx.): 3000000000
#
# Overhead\tShared Object\tSymbol
 40.00%\tlibpython3.11.so.1.0\t[.] _PyEval_EvalFrameDefault
 20.00%\tkey_map.cpython-311-x86_64-linux-gnu.so\t[.] KeyMap_lookup
 10.00%\tlibc.so.6\t[.] _int_realloc
  5.00%\tlibc.so.6\t[.] cfree@GLIBC_2.2.5
  5.00%\tlibc.so.6\t[.] __memmove_avx_unaligned_erms
  4.00%\tlibpython3.11.so.1.0\t[.] _PyObject_Malloc
  1.00%\t[kernel.kallsyms]\t[k] finish_task_switch
"""


def test_report_shares_of_libpython_and_the_allocator() -> None:
    profile = server_profile.parse_report(REPORT)
    assert profile.samples == 12_000
    assert profile.libpython == pytest.approx(0.44)
    # glibc's allocator only: memmove and the interpreter's own allocator are not in it
    assert profile.allocator == pytest.approx(0.15)
    assert profile.top[:2] == [(0.4, "libpython3.11.so.1.0", "_PyEval_EvalFrameDefault"),
                               (0.2, "key_map.cpython-311-x86_64-linux-gnu.so",
                                "KeyMap_lookup")]
    assert profile.top[-1] == (0.01, "[kernel.kallsyms]", "finish_task_switch")
