"""The op-traits table (guard.compiler.ir.ops): every IR op has a row, every row is an IR op,
and the planner, the layout pass and the fuser read their sets from it."""

from __future__ import annotations

import pytest

from guard.compiler.graph import memory_alias
from guard.compiler.graph import view as graph_view
from guard.compiler.ir import layout, ops, shapes
from guard.compiler.reference import KERNELS


def test_every_ir_op_has_a_row_and_every_row_is_an_ir_op():
    # Control flow has a row (the view and the partitioner recognise it) but no kernel:
    # the importer refuses it.
    ir_ops = set(KERNELS) | {"If", "Loop", "Scan"}
    assert sorted(ir_ops - set(ops.TRAITS)) == []
    assert sorted(set(ops.TRAITS) - ir_ops) == []


def test_consumers_read_the_table():
    assert memory_alias.VIEW_OPS == ops.ops_where(view="alias") == {"Identity", "Reshape"}
    assert memory_alias.INPLACE_OPS == ops.ops_where(inplace=True)
    assert layout.LAYOUT_OPS == ops.ops_where(layout=True)
    assert graph_view.CONTROL_FLOW_OPS == {"If", "Loop", "Scan"}
    assert shapes.ELEMENTWISE == ops.ELEMENTWISE_OPS
    assert shapes.COMPARE == ops.family("compare")


@pytest.mark.parametrize("op", ["Add", "Relu", "Where", "Cast", "BatchNormalization"])
def test_inplace_rows_are_one_element_per_output_element(op):
    t = ops.traits(op)
    assert t.inplace and not t.reduction and not t.view


def test_reductions_and_views_are_disjoint_from_inplace():
    assert not (ops.ops_where(reduction=True) & ops.INPLACE_OPS)
    assert not ({op for op, t in ops.TRAITS.items() if t.view} & ops.INPLACE_OPS)


def test_unknown_op_names_itself():
    with pytest.raises(KeyError, match="'Bogus' has no row"):
        ops.traits("Bogus")
