#pragma once
/// One function per binding file; module.cc calls them in order. Each area of the op set owns
/// its file so that it compiles on its own (pybind11 translation units are slow to build).

#include <pybind11/pybind11.h>

namespace kiln::frontend {

void bindDTypes(pybind11::module_ &m);
void bindTensor(pybind11::module_ &m);
void bindAutograd(pybind11::module_ &m);
void bindInterop(pybind11::module_ &m);
void bindReduce(pybind11::module_ &m);
void bindShapeOps(pybind11::module_ &m);
void bindIndexing(pybind11::module_ &m);
void bindLinalg(pybind11::module_ &m);
void bindNN(pybind11::module_ &m);
void bindFactory(pybind11::module_ &m);
/// Every op-table row with an eager kernel (bind_op_table.cc); after the hand-written bindings,
/// so that a name bound both ways is an error at import.
void bindOpTable(pybind11::module_ &m);
void bindCapture(pybind11::module_ &m);
void bindIR(pybind11::module_ &m);
/// `_C._ir.GraphBuilder` and `_C._ir.Graph` (called by bindIR on its submodule).
void bindGraphBuilder(pybind11::module_ &ir);
void bindCuda(pybind11::module_ &m);
void bindDistributed(pybind11::module_ &m);
void bindCompiler(pybind11::module_ &m);

} // namespace kiln::frontend
