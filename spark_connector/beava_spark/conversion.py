"""Spark columns -> beava event fields.

The conversion target of each column is its beava wire type: the default for its Spark
type, or the type given by the caller's ``schema=`` mapping (there is no schema-read
endpoint on the wire, spec/wire.md). Every conversion is a Spark SQL expression, so
rows leave the JVM as ready-made JSON bodies and the Python workers never touch a value.

| Spark type | default | also allowed | value sent |
|---|---|---|---|
| byte, short, int, long | i64 | f64, str | the integer (a double for f64, decimal text) |
| float, double | f64 | | the number; NaN and ±inf become null |
| decimal(p, s) | f64 | i64 (s = 0, p <= 18), str | a double; a long; the exact text |
| string, char, varchar | str | datetime | the text |
| boolean | bool | | true / false |
| date | i64 | str, datetime | epoch ms of 00:00 UTC that day; ``YYYY-MM-DD`` |
| timestamp | i64 | str, datetime | epoch ms (floor); ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (UTC) |
| timestamp_ntz | i64 | str, datetime | epoch ms of the wall clock read as UTC; ISO, no zone |
| void (all null) | (any) | | null |

Nulls are left out of the body (spec/wire.md §6.2: an absent field is null), which an
optional field or a field with a default accepts; a required field rejects the row with
``invalid_event``. Any other Spark type (binary, array, map, struct, interval, variant,
time, ...) is refused before anything is sent.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import ConversionError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructType

WIRE_TYPES = ("str", "i64", "f64", "bool", "datetime")
"""beava field types the connector can produce (spec/wire.md §6.3)."""

MS_PER_DAY = 86_400_000

# Spark type family -> allowed beava types, the default first.
_TARGETS: dict[str, tuple[str, ...]] = {
    "integral": ("i64", "f64", "str"),
    "floating": ("f64",),
    "decimal": ("f64", "i64", "str"),
    "string": ("str", "datetime"),
    "boolean": ("bool",),
    "date": ("i64", "str", "datetime"),
    "timestamp": ("i64", "str", "datetime"),
    "timestamp_ntz": ("i64", "str", "datetime"),
    "null": WIRE_TYPES,
}

_SUPPORTED = ("byte, short, int, long, float, double, decimal, string, char, varchar, "
              "boolean, date, timestamp, timestamp_ntz, void")


def _family(data_type: DataType) -> str | None:
    from pyspark.sql import types as t

    if isinstance(data_type, t.IntegralType):
        return "integral"
    if isinstance(data_type, (t.FloatType, t.DoubleType)):
        return "floating"
    if isinstance(data_type, t.DecimalType):
        return "decimal"
    if isinstance(data_type, (t.StringType, t.CharType, t.VarcharType)):
        return "string"
    if isinstance(data_type, t.BooleanType):
        return "boolean"
    if isinstance(data_type, t.DateType):
        return "date"
    if isinstance(data_type, t.TimestampNTZType):
        return "timestamp_ntz"
    if isinstance(data_type, t.TimestampType):
        return "timestamp"
    if isinstance(data_type, t.NullType):
        return "null"
    return None


@dataclass(frozen=True)
class FieldConversion:
    """How one column becomes one event field."""

    name: str
    spark_type: str
    family: str
    wire_type: str

    def sql(self) -> str:
        """The Spark SQL text of the field's wire value, from its column read by name (one
        call to the JVM parses a whole projection of these, where a Column costs one per
        function)."""
        col = quoted(self.name)
        family, wire = self.family, self.wire_type
        if family == "floating":
            as_double = f"CAST({col} AS DOUBLE)"
            return (f"CASE WHEN NOT isnan({as_double}) AND abs({as_double}) != "
                    f"CAST('Infinity' AS DOUBLE) THEN {as_double} END")
        if family == "integral":
            return {"i64": col, "f64": f"CAST({col} AS DOUBLE)",
                    "str": f"CAST({col} AS STRING)"}[wire]
        if family == "decimal":
            return {"f64": f"CAST({col} AS DOUBLE)", "i64": f"CAST({col} AS BIGINT)",
                    "str": f"CAST({col} AS STRING)"}[wire]
        if family == "date":
            if wire == "i64":
                return f"CAST(unix_date({col}) AS BIGINT) * {MS_PER_DAY}"
            return f"CAST({col} AS STRING)"
        if family in ("timestamp", "timestamp_ntz"):
            millis = f"unix_millis({col})"
            if wire == "i64":
                return millis
            return _iso_text(millis, zone="Z" if family == "timestamp" else "")
        return col  # string, boolean, null: already wire values



@dataclass(frozen=True)
class ConversionPlan:
    """The conversion of every column of a DataFrame, in column order."""

    fields: tuple[FieldConversion, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def wire_types(self) -> dict[str, str]:
        """``{field: beava type}``."""
        return {f.name: f.wire_type for f in self.fields}

    def allowed_targets(self) -> dict[str, tuple[str, ...]]:
        """``{column: beava types it may be sent as}``, the default first."""
        allowed = {}
        for conv in self.fields:
            targets = _TARGETS[conv.family]
            if conv.family == "decimal" and conv.spark_type != "decimal" and not \
                    _integral_decimal_text(conv.spark_type):
                targets = tuple(t for t in targets if t != "i64")
            allowed[conv.name] = targets
        return allowed

    def bodies(self, df: DataFrame) -> DataFrame:
        """``df`` with every column converted to its wire value."""
        return df.selectExpr(*[f"{f.sql()} AS {quoted(f.name)}" for f in self.fields])


def plan_conversion(schema: StructType, overrides: Mapping[str, str] | None = None
                    ) -> ConversionPlan:
    """The conversion of every column of ``schema``; ``overrides`` maps column names to
    beava types (``str``, ``i64``, ``f64``, ``bool``, ``datetime``). Raises
    ConversionError listing every problem: unsupported column types, unknown columns or
    types in ``overrides``, disallowed conversions, duplicate column names."""
    overrides = dict(overrides or {})
    problems: list[str] = []
    names = [f.name for f in schema.fields]
    for name, count in Counter(names).items():
        if count > 1:
            problems.append(f"column {name!r} appears {count} times; rename or drop duplicates")
    for name, wire in overrides.items():
        if name not in names:
            problems.append(f"schema names column {name!r}, which the DataFrame does not have "
                            f"(columns: {', '.join(names)})")
        elif wire not in WIRE_TYPES:
            problems.append(f"schema gives column {name!r} the type {wire!r}; "
                            f"beava types are {', '.join(WIRE_TYPES)}")
    fields: list[FieldConversion] = []
    for field in schema.fields:
        spark_type = field.dataType.simpleString()
        family = _family(field.dataType)
        if family is None:
            problems.append(
                f"column {field.name!r} has Spark type {spark_type}, which cannot be sent "
                f"(supported: {_SUPPORTED}); drop it or convert it to a supported type first"
            )
            continue
        allowed = _TARGETS[family]
        wire = overrides.get(field.name, allowed[0])
        if wire not in WIRE_TYPES:
            continue  # reported above
        if wire not in allowed or (family == "decimal" and wire == "i64"
                                   and not _integral_decimal(field.dataType)):
            extra = (" (i64 needs decimal(p, 0) with p <= 18)" if family == "decimal" else "")
            problems.append(f"column {field.name!r} ({spark_type}) cannot be sent as {wire}; "
                            f"allowed: {', '.join(allowed)}{extra}")
            continue
        fields.append(FieldConversion(field.name, spark_type, family, wire))
    if problems:
        raise ConversionError(problems)
    return ConversionPlan(tuple(fields))


def _integral_decimal(data_type: DataType) -> bool:
    from pyspark.sql.types import DecimalType

    return (isinstance(data_type, DecimalType)
            and data_type.scale == 0 and data_type.precision <= 18)


def _integral_decimal_text(spark_type: str) -> bool:
    """Whether ``decimal(p,s)`` text has s = 0 and p <= 18."""
    inner = spark_type[spark_type.find("(") + 1:spark_type.rfind(")")]
    precision, _, scale = inner.partition(",")
    try:
        return int(scale or 0) == 0 and int(precision) <= 18
    except ValueError:
        return False


def quoted(name: str) -> str:
    """``name`` as a Spark column reference (backticks, so dots and spaces are literal)."""
    return "`" + name.replace("`", "``") + "`"


def _iso_text(millis: str, zone: str) -> str:
    """ISO 8601 text of epoch ``millis`` computed arithmetically, so it does not depend on
    the session time zone."""
    time_of_day = f"pmod({millis}, {MS_PER_DAY})"
    day = f"CAST(({millis} - {time_of_day}) / {MS_PER_DAY} AS INT)"
    clock = (f"format_string('%02d:%02d:%02d.%03d', CAST({time_of_day} / 3600000 AS INT), "
             f"CAST(pmod({time_of_day}, 3600000) / 60000 AS INT), "
             f"CAST(pmod({time_of_day}, 60000) / 1000 AS INT), "
             f"CAST(pmod({time_of_day}, 1000) AS INT))")
    return f"concat(CAST(date_from_unix_date({day}) AS STRING), 'T', {clock}, '{zone}')"
