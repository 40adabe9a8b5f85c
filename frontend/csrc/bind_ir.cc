// `kiln._C._ir`: the graph IR seen from Python.
//
// The capture frontend builds its graphs in memory (bind_graph_builder.cc). The functions here
// read .kir text (an exported program's file, tests) with the C++ parser and verifier, the same
// ones kiln-opt runs, and retype it with the shape-infer pass. Errors are ValueErrors
// whose message is the diagnostic as compilers print it, `file:line:col: error: message`.

#include "frontend/csrc/arg_parser.h"
#include "frontend/csrc/bindings.h"
#include "frontend/csrc/eager_kernels.h"
#include "ir/op_kind.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/sym_int.h"
#include "ir/verifier.h"
#include "passes/shape_infer.h"

#include <fmt/format.h>
#include <pybind11/stl.h>

namespace py = pybind11;

namespace kiln::frontend {

namespace {

/// Every graph of `text` printed again, separated by blank lines (as kiln-opt prints them).
std::string parseAndPrint(const std::string &text, const std::string &filename) {
  ir::ParsedModule module = ir::parseModule(text, filename);
  std::string out;
  for (size_t i = 0; i < module.graphs.size(); ++i)
    out += (i ? "\n" : "") + ir::printGraph(*module.graphs[i]);
  return out;
}

/// `d` pointing at the line that defines its node, naming the user's source line when known.
ir::DiagnosticError located(ir::Diagnostic d, const ir::ParsedModule &module,
                            const std::string &filename) {
  d.buffer = filename;
  if (d.node) {
    if (auto it = module.positions.find(d.node); it != module.positions.end())
      d.pos = it->second;
    if (d.node->loc().known())
      d.message += fmt::format(" (from {}:{})", d.node->loc().file, d.node->loc().line);
  }
  return ir::DiagnosticError(std::move(d));
}

/// Parses and verifies every graph of `text`; a verifier error points at the line that defines
/// the offending node and names the user's source line when the node has one.
void verifyText(const std::string &text, const std::string &filename) {
  ir::ParsedModule module = ir::parseModule(text, filename);
  for (const auto &graph : module.graphs) {
    if (std::optional<ir::Diagnostic> d = ir::verify(*graph))
      throw located(std::move(*d), module, filename);
  }
}

/// Every graph of `text` with its result types recomputed by the shape-infer pass, verified and
/// printed again (so captured graphs get symbolic result sizes from their symbolic inputs).
std::string inferShapesText(const std::string &text, const std::string &filename) {
  ir::ParsedModule module = ir::parseModule(text, filename);
  std::string out;
  for (size_t i = 0; i < module.graphs.size(); ++i) {
    ir::Graph &graph = *module.graphs[i];
    try {
      passes::inferShapes(graph);
    } catch (const ir::DiagnosticError &e) {
      throw located(e.diagnostic(), module, filename);
    }
    if (std::optional<ir::Diagnostic> d = ir::verify(graph))
      throw located(std::move(*d), module, filename);
    out += (i ? "\n" : "") + ir::printGraph(graph);
  }
  return out;
}

/// The op table as data for the capture frontend: one dict per KILN_SPELLING row, with the op's
/// keyword, traits and attribute kinds (frontend/kiln/_capture/op_table.py derives its mapping
/// of Python callables from it).
py::list opTable() {
  static const std::pair<ir::OpTraits, const char *> kTraitNames[] = {
      {ir::trait::Pure, "pure"},         {ir::trait::Elementwise, "elementwise"},
      {ir::trait::View, "view"},         {ir::trait::Reduction, "reduction"},
      {ir::trait::Extern, "extern"},     {ir::trait::InPlace, "inplace"},
      {ir::trait::FloatResult, "float"}, {ir::trait::Comparison, "bool_result"},
      {ir::trait::Integral, "integral"}, {ir::trait::NoGradient, "no_gradient"}};
  py::list rows;
  for (const ir::OpSpelling &s : ir::opSpellings()) {
    py::dict attrs, row;
    for (const ir::AttrSpec &a : ir::attrSpecs(s.op))
      attrs[py::str(std::string(a.name))] = std::string(ir::attrKindName(a.kind));
    py::list traits;
    for (auto [bit, name] : kTraitNames)
      if (ir::hasTrait(s.op, bit))
        traits.append(name);
    row["op"] = std::string(ir::opKeyword(s.op));
    row["schema"] = std::string(s.schema);
    row["spellings"] = std::string(s.spellings);
    py::dict forms; // spelling -> (inplace, reflected)
    for (std::string_view rest = s.spellings; !rest.empty();) {
      size_t space = rest.find(' ');
      std::string_view spelling = rest.substr(0, space);
      rest = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
      if (spelling.empty())
        continue;
      ir::SpellingForm form = ir::spellingForm(spelling);
      forms[py::str(std::string(spelling))] = py::make_tuple(form.inplace, form.reflected);
    }
    row["forms"] = forms;
    row["fixed"] = std::string(s.fixed);
    ir::OpSchema schema = ir::parseOpSchema(s.schema);
    py::list args;
    for (const ir::SchemaArg &a : schema.args) {
      py::dict arg;
      arg["name"] = a.name;
      arg["type"] = a.typeText;
      arg["kw_only"] = a.kwOnly;
      if (a.defaultText)
        arg["default"] = schemaValue(*a.defaultText);
      args.append(arg);
    }
    row["args"] = args;
    py::dict fixed; // `min_val=0.0, max_val=6.0`
    for (std::string_view rest = s.fixed; !rest.empty();) {
      size_t comma = rest.find(',');
      std::string_view item = rest.substr(0, comma);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      size_t eq = item.find('=');
      auto trim = [](std::string_view v) {
        while (!v.empty() && v.front() == ' ')
          v.remove_prefix(1);
        while (!v.empty() && v.back() == ' ')
          v.remove_suffix(1);
        return std::string(v);
      };
      fixed[py::str(trim(item.substr(0, eq)))] = schemaValue(trim(item.substr(eq + 1)));
    }
    row["fixed_values"] = fixed;
    // Whether the row's spellings are bound from it (bind_op_table.cc) or still by hand.
    row["eager_kernel"] = findEagerKernel(s.op, schema) != nullptr;
    row["attrs"] = attrs;
    row["traits"] = traits;
    rows.append(row);
  }
  return rows;
}

} // namespace

void bindIR(py::module_ &m) {
  py::module_ ir = m.def_submodule(
      "_ir", "The graph IR: graphs built in memory, and the .kir text (parse, print, verify)");
  bindGraphBuilder(ir);
  ir.def("parse_and_print", &parseAndPrint, py::arg("text"), py::arg("filename") = "<kir>",
         "Parses .kir text and prints it back in canonical form (ValueError on a syntax error).");
  ir.def("verify", &verifyText, py::arg("text"), py::arg("filename") = "<kir>",
         "Parses and verifies .kir text; raises ValueError with `file:line:col: error: ...`.");
  ir.def("infer_shapes", &inferShapesText, py::arg("text"), py::arg("filename") = "<kir>",
         "Recomputes every result type of .kir text (the shape-infer pass: dtypes, symbolic "
         "sizes, view strides) and prints it; ValueError with `file:line:col: error: ...`.");
  ir.def("op_table", &opTable,
         "The op table's user-facing rows (ir/ops.def KILN_SPELLING): dicts of op keyword, torch "
         "schema, spellings, fixed attributes, attribute kinds, traits and whether the row has an "
         "eager "
         "kernel (its spellings are bound from the row).");
  ir.def(
      "canonical_sym_int", [](const std::string &text) { return ir::SymInt::parse(text).str(); },
      py::arg("text"),
      "The canonical text of a symbolic int expression (`s0 + s0*2` -> `s0*3`); ValueError on "
      "malformed text.");
}

} // namespace kiln::frontend
