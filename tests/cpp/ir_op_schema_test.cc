#include "ir/op_kind.h"
#include "ir/op_schema.h"

#include <kiln_catch.h>

#include <stdexcept>

using namespace kiln::ir;

TEST_CASE("every op-table schema parses") {
  for (const OpSpelling &row : opSpellings()) {
    INFO(row.schema);
    OpSchema s = parseOpSchema(row.schema);
    CHECK(!s.name.empty());
    CHECK(!s.args.empty());
  }
}

TEST_CASE("a schema's arguments: types, optional, keyword-only, list sizes, defaults") {
  OpSchema s = parseOpSchema(
      "sum(Tensor input, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> "
      "Tensor");
  CHECK(s.name == "sum");
  REQUIRE(s.args.size() == 4);
  CHECK(s.args[0].type == SchemaType::Tensor);
  CHECK(!s.args[0].defaultText);
  CHECK(s.args[1].type == SchemaType::IntList);
  CHECK(s.args[1].listSize == 1);
  CHECK(s.args[1].optional);
  CHECK(s.args[1].typeText == "int[1]?");
  CHECK(*s.args[1].defaultText == "None");
  CHECK(s.args[2].type == SchemaType::Bool);
  CHECK(!s.args[2].kwOnly);
  CHECK(s.args[3].kwOnly);
  CHECK(s.args[3].type == SchemaType::ScalarType);
  CHECK(s.numPositional() == 3);
  CHECK(s.find("keepdim") == 2);
  CHECK(s.find("out") == -1);

  OpSchema roll = parseOpSchema("roll(Tensor input, int[1] shifts, int[1] dims=[0, 1]) -> Tensor");
  REQUIRE(roll.args.size() == 3);
  CHECK(*roll.args[2].defaultText == "[0, 1]");
  CHECK(schemaTypeName(roll.args[1].type) == "tuple of ints");
  CHECK(schemaTypeName(SchemaType::Scalar) == "Number");
}

TEST_CASE("malformed schemas are refused with the part that is wrong") {
  auto message = [](const char *text) {
    try {
      parseOpSchema(text);
    } catch (const std::invalid_argument &e) {
      return std::string(e.what());
    }
    return std::string("parsed");
  };
  CHECK_THAT(message("sin(Tensor input"), Catch::Matchers::Contains("name(arguments)"));
  CHECK_THAT(message("sin(Tensr input) -> Tensor"),
             Catch::Matchers::Contains("unknown type 'Tensr'"));
  CHECK_THAT(message("add(Tensor input, Tensor input) -> Tensor"),
             Catch::Matchers::Contains("'input' appears twice"));
  CHECK_THAT(message("f(Tensor input, int a=1, int b) -> Tensor"),
             Catch::Matchers::Contains("'b' follows one with a default"));
  CHECK_THAT(message("f(Tensor input, int[x] a) -> Tensor"),
             Catch::Matchers::Contains("list size that is not a number"));
  CHECK_THAT(message("f(Tensor) -> Tensor"), Catch::Matchers::Contains("no type or no name"));
}
