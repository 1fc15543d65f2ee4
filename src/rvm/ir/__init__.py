"""The IR: types with symbolic shapes, expressions, modules, the Builder and analyses."""

from rvm.ir.expr import (
    BindingBlock,
    Call,
    Clause,
    Constant,
    Constructor,
    Expr,
    Function,
    GlobalVar,
    If,
    Match,
    Node,
    Op,
    Pattern,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    SeqExpr,
    Tuple,
    TupleGetItem,
    Var,
    VarBinding,
    const,
    pattern_vars,
    seq,
)
from rvm.ir.infer import infer_type, join_types
from rvm.ir.module import ADTDef, IRModule
from rvm.ir.op import OpPattern, get_op, list_ops, register_op
from rvm.ir.types import (
    DTYPES,
    ADTType,
    AnyType,
    Dim,
    FuncType,
    Shape,
    ShapeType,
    TensorType,
    TupleType,
    Type,
    promote_dtypes,
    scalar,
    tensor,
)

__all__ = [name for name in dir() if not name.startswith("_")]

from rvm.ir.analysis import bound_vars, called_globals, free_vars  # noqa: E402
from rvm.ir.builder import Builder  # noqa: E402
from rvm.ir.functor import ExprMutator, ExprVisitor  # noqa: E402
from rvm.ir.structural import (  # noqa: E402
    assert_structural_equal,
    structural_diff,
    structural_equal,
    structural_hash,
)
from rvm.ir.verify import verify  # noqa: E402

__all__ = [name for name in dir() if not name.startswith("_")]
