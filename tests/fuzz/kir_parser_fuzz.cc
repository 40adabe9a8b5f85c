/// Fuzz target for the .kir parser: arbitrary bytes must either parse or fail with a
/// DiagnosticError, and whatever parses must verify without throwing and print to text that
/// parses back to the same text (print(parse(print(g))) == print(g)).
///
/// Built by tests/fuzz/run.sh with clang's libFuzzer, and by Bazel (with KILN_FUZZ_ENTRY
/// renaming the entry point) into tests/cpp:fuzz_corpus_test, which replays the seed corpus and
/// deterministic mutations of it.

#include "ir/diagnostic.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#ifndef KILN_FUZZ_ENTRY
#define KILN_FUZZ_ENTRY LLVMFuzzerTestOneInput
#endif

namespace {

[[noreturn]] void failRoundTrip(const char *what, const std::string &first,
                                const std::string &second) {
  std::fprintf(stderr, "kir_parser_fuzz: %s\n--- printed ---\n%s\n--- then ---\n%s\n", what,
               first.c_str(), second.c_str());
  std::abort();
}

} // namespace

extern "C" int KILN_FUZZ_ENTRY(const uint8_t *data, size_t size) {
  std::string_view text(reinterpret_cast<const char *>(data), size);
  kiln::ir::ParsedModule module;
  try {
    module = kiln::ir::parseModule(text, "fuzz.kir");
  } catch (const kiln::ir::DiagnosticError &) {
    return 0; // the documented way to reject malformed text
  }
  for (const auto &graph : module.graphs) {
    // verify() reports broken invariants as a value; it never throws.
    (void)kiln::ir::verify(*graph);
    std::string printed = kiln::ir::printGraph(*graph);
    std::unique_ptr<kiln::ir::Graph> again;
    try {
      again = kiln::ir::parseGraph(printed, "printed.kir");
    } catch (const kiln::ir::DiagnosticError &e) {
      failRoundTrip("the printed text does not parse", printed, e.what());
    }
    std::string reprinted = kiln::ir::printGraph(*again);
    if (reprinted != printed)
      failRoundTrip("printing the re-parsed graph changes the text", printed, reprinted);
    auto d1 = kiln::ir::verify(*graph), d2 = kiln::ir::verify(*again);
    if (d1.has_value() != d2.has_value() || (d1 && d1->message != d2->message))
      failRoundTrip("the re-parsed graph verifies differently", d1 ? d1->message : "ok",
                    d2 ? d2->message : "ok");
  }
  return 0;
}
