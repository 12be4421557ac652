"""What makes an existing Delta table's schema take, or refuse, the rows a job declares.

Pure comparisons of Spark schemas, no Spark session: `jobs/runtime/delta.ensure` asks them
before it adds missing columns to a table or refuses it.
"""

from __future__ import annotations

from pyspark.sql.types import ArrayType, DataType, MapType, StructField, StructType


def schema_differences(declared: StructType, actual: StructType) -> list[str]:
    """What in an existing table's schema (`actual`) would make writes of `declared` fail.

    One line per column: a declared column the table lacks, a different type, a column that
    is NOT NULL in the table where the declaration allows null (nested fields included), and
    a NOT NULL column of the table that is not declared (a write would leave it null). Extra
    nullable columns and stricter declarations are not differences: writes still succeed.
    Empty when the table takes the declared rows.
    """
    existing = {f.name: f for f in actual.fields}
    lines = []
    for field in declared.fields:
        have = existing.get(field.name)
        if have is None:
            lines.append(
                f"{field.name}: declared {field.dataType.simpleString()}, not in the table"
            )
        elif nullable(have.dataType) != nullable(field.dataType):
            lines.append(
                f"{field.name}: declared {field.dataType.simpleString()}, "
                f"the table has {have.dataType.simpleString()}"
            )
        elif field.nullable and not have.nullable:
            lines.append(f"{field.name}: declared nullable, NOT NULL in the table")
        elif not _accepts(have.dataType, field.dataType):
            lines.append(
                f"{field.name}: declared with nullable nested values, NOT NULL in the table"
            )
    declared_names = set(declared.fieldNames())
    lines += [
        f"{f.name}: NOT NULL in the table, not declared"
        for f in actual.fields
        if f.name not in declared_names and not f.nullable
    ]
    return lines


def nullable(kind: DataType) -> DataType:
    """`kind` with every nested field, element and value nullable: its shape alone."""
    if isinstance(kind, StructType):
        return StructType([StructField(f.name, nullable(f.dataType), True) for f in kind.fields])
    if isinstance(kind, ArrayType):
        return ArrayType(nullable(kind.elementType), True)
    if isinstance(kind, MapType):
        return MapType(nullable(kind.keyType), nullable(kind.valueType), True)
    return kind


def with_declared_columns(actual: DataType, declared: DataType) -> DataType:
    """`actual` plus, at every depth, the struct fields `declared` has and `actual` lacks
    (nullable): what adding the missing columns would make of the table's schema."""
    if isinstance(actual, StructType) and isinstance(declared, StructType):
        wanted = {f.name: f for f in declared.fields}
        fields = [
            StructField(
                f.name,
                with_declared_columns(f.dataType, wanted[f.name].dataType)
                if f.name in wanted
                else f.dataType,
                f.nullable,
                f.metadata,
            )
            for f in actual.fields
        ]
        have = set(actual.fieldNames())
        fields += [
            StructField(f.name, f.dataType, True) for f in declared.fields if f.name not in have
        ]
        return StructType(fields)
    if isinstance(actual, ArrayType) and isinstance(declared, ArrayType):
        element = with_declared_columns(actual.elementType, declared.elementType)
        return ArrayType(element, actual.containsNull)
    if isinstance(actual, MapType) and isinstance(declared, MapType):
        value = with_declared_columns(actual.valueType, declared.valueType)
        return MapType(actual.keyType, value, actual.valueContainsNull)
    return actual


def _accepts(target: DataType, source: DataType) -> bool:
    """Whether values of `source` fit a column of `target` of the same shape: wherever
    `source` allows null (nested fields, elements, map values), `target` does too."""
    if isinstance(target, StructType) and isinstance(source, StructType):
        fields = {f.name: f for f in target.fields}
        return all(
            (fields[f.name].nullable or not f.nullable)
            and _accepts(fields[f.name].dataType, f.dataType)
            for f in source.fields
        )
    if isinstance(target, ArrayType) and isinstance(source, ArrayType):
        return (target.containsNull or not source.containsNull) and _accepts(
            target.elementType, source.elementType
        )
    if isinstance(target, MapType) and isinstance(source, MapType):
        return (target.valueContainsNull or not source.valueContainsNull) and _accepts(
            target.valueType, source.valueType
        )
    return True
