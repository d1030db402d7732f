"""The pipeline DSL: ``@bv.event`` / ``@bv.table``, chain methods, ``bv.col`` / ``bv.lit``,
operator functions and the register payload compiler (spec/sdk.md §2-§7). Pure Python with
no I/O; ``beava.app`` sends what ``beava.dsl.compiler`` builds."""
