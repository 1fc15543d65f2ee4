"""The exec modes behind one interface (`base.ExecMode`): how a VM runs a function.

- `bytecode`: the dispatch loop over the register bytecode (`decode` turns an executable's
  instructions into the loop's tuples).
- `compiled`: each function as generated Python (`compiled_codegen`), per basic block.
- `native`: each function as Numba-compiled code (`native_codegen`, `native_support` the
  helpers its files import), falling back to compiled for what it cannot lower.
- `lowering`: the toolkit the compiled and native modes share: flow analysis (leaders,
  blocks, dataflow), the scalar dataflow, one block state machine, one operand renderer with a
  hook per mode (the bytecode loop renders through it too) and one source writer.

Modes import `rvm.runtime`'s records, `rvm.kernels` and `rvm.runtime.loading`; the VM
(`rvm.runtime.vm`) picks one per call.
"""
