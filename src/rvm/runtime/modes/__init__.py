"""The exec modes behind one interface (`base.ExecMode`): how a VM runs a function.

- `bytecode`: the dispatch loop over the register bytecode (`decode` turns an executable's
  instructions into the loop's tuples).
- `compiled`: each function as generated Python (`compiled_codegen`), per basic block.
- `native`: each function as Numba-compiled code (`native_codegen`, `native_support` the
  helpers its files import), falling back to compiled for what it cannot lower.
- `flow`: the flow analysis the compiled and native modes share (leaders, blocks, liveness).

Modes import `rvm.runtime`'s records, `rvm.kernels` and `rvm.runtime.loading`; the VM
(`rvm.runtime.vm`) picks one per call.
"""
