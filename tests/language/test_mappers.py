"""Every mapper handles every node kind of its family (completeness), and the dispatch
table extends along the class hierarchy (a code generator adds its own node kinds)."""
import dataclasses
import importlib
import inspect
import pkgutil

import pytest

import tegrad
import tegrad.ir.expr as ex
import tegrad.ir.tensor as tensor_module
from tegrad.ir.mapper import ChildrenMapper, CombineMapper, Dispatcher, IdentityMapper, Mapper
from tegrad.ir.stages import StageMapper


def all_modules():
    names = []
    for info in pkgutil.walk_packages(tegrad.__path__, "tegrad."):
        names.append(info.name)
    return [importlib.import_module(n) for n in names if not n.endswith("__main__")]


def concrete_subclasses(base):
    abstract = {Dispatcher, Mapper, CombineMapper, StageMapper}
    out, stack = set(), [base]
    while stack:
        cls = stack.pop()
        for sub in cls.__subclasses__():
            stack.append(sub)
            if sub not in abstract and sub.__module__.startswith("tegrad."):
                out.add(sub)
    return sorted(out, key=lambda c: (c.__module__, c.__qualname__))


MODULES = all_modules()
EXPR_KINDS = {cls for cls in vars(ex).values() if inspect.isclass(cls)
              and issubclass(cls, ex.Expr) and dataclasses.is_dataclass(cls)}


def test_the_expression_table_lists_every_node_kind():
    assert set(Mapper._method_names) == EXPR_KINDS


@pytest.mark.parametrize("cls", concrete_subclasses(Mapper), ids=lambda c: c.__qualname__)
def test_expression_mapper_is_complete(cls):
    missing = [name for name in cls._method_names.values() if not callable(getattr(cls, name,
                                                                                   None))]
    assert not missing, f"{cls.__qualname__} lacks {missing}"


STAGE_KINDS = {cls for name, cls in vars(tensor_module).items() if inspect.isclass(cls)
               and issubclass(cls, tensor_module._Frozen) and name.endswith("Op")}


def test_the_stage_table_lists_every_stage_kind():
    assert tensor_module.ScanOp in STAGE_KINDS
    assert set(StageMapper._method_names) == STAGE_KINDS


@pytest.mark.parametrize("cls", concrete_subclasses(StageMapper), ids=lambda c: c.__qualname__)
def test_stage_mapper_is_complete(cls):
    missing = [name for name in cls._method_names.values() if not callable(getattr(cls, name,
                                                                                   None))]
    assert not missing, f"{cls.__qualname__} lacks {missing}"


def test_a_subclass_adds_a_node_kind():
    @dataclasses.dataclass(frozen=True, eq=False, repr=False)
    class Twice(ex.Expr):
        a: ex.Expr
        dtype: str

    class Children(ChildrenMapper):
        _method_names = {Twice: "map_twice"}

        def map_twice(self, e):
            return (e.a,)

    class Depth(CombineMapper):
        _method_names = {Twice: "map_twice"}
        children_of = Children()

        def map_var(self, e):
            return 0

        def map_binary(self, e, a, b):
            return 1 + max(a, b)

        map_const = map_var

        def map_twice(self, e, a):
            return 1 + a

    class Doubled(IdentityMapper):
        _method_names = {Twice: "map_twice"}

        def map_twice(self, e):
            return ex.Binary("add", self(e.a), self(e.a), e.dtype)

    i = ex.Var("i")
    assert Depth()(Twice(i + 1, "int32")) == 2
    assert str(Doubled()(Twice(i, "int32") * 3)) == "(i + i) * 3"
    assert Depth._method_names[ex.Var] == "map_var" and Twice not in Mapper._method_names
    with pytest.raises(TypeError, match="IdentityMapper"):
        IdentityMapper()(Twice(i, "int32"))
