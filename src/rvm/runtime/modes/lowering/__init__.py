"""The lowering toolkit the generated exec modes (compiled, native) share.

- `flow`: the flow analysis of one function's bytecode: successors, leaders (basic blocks),
  the registers each instruction reads and writes, liveness-like dataflow (surely assigned,
  may hold memory), small register kinds, and the shape instructions written inline
  (`ShapePlan`);
- `scalars`: the scalar dataflow, which 0-d registers live as machine scalars;
- `blocks`: the one block state machine (`while True:` over the basic blocks on `_pc`);
- `operands`: the one operand renderer, with a method per operand kind a mode overrides, and
  the namespace's `Names`;
- `writer`: the one source writer (lines with their indent and pc).

The shape-pattern constants are decoded by `rvm.runtime.shape_patterns`, which the builtins
share. The toolkit imports only `rvm.runtime`'s records and `semantics`.
"""
