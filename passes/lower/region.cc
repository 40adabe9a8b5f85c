// Regions of views and scatters, and nested scatters composed into one write (region.h).

#include "passes/lower/region.h"

#include "passes/lower/lower_context.h"

#include <fmt/format.h>

namespace kiln::passes::lower {

using ir::OpKind;
using ir::SymInt;

std::string regionText(const std::vector<Region> &region) {
  std::string out;
  for (const Region &r : region)
    out += r.select ? fmt::format(".select({}, {})", r.dim, r.start.str())
                    : fmt::format(".slice({}, {}, {}, {})", r.dim, r.start.str(),
                                  (r.start + (r.len - 1) * SymInt(r.step) + 1).str(), r.step);
  return out;
}

SymInt normalizeIndex(const SymInt &index, const SymInt &size, bool clamp) {
  std::optional<int64_t> i = index.constant();
  if (!i || *i >= 0) {
    std::optional<int64_t> s = size.constant();
    if (clamp && i && s && *i > *s)
      return *s;
    return index;
  }
  SymInt r = index + size;
  if (clamp && r.constant() && *r.constant() < 0)
    return 0;
  return r;
}

bool isScatter(const ir::Node &n) {
  return n.op() == OpKind::SelectScatter || n.op() == OpKind::SliceScatter;
}

std::optional<Region> regionOf(const ir::Node &n) {
  bool select = n.op() == OpKind::SelectScatter || n.op() == OpKind::Select;
  if (!select && n.op() != OpKind::SliceScatter && n.op() != OpKind::Slice)
    return std::nullopt;
  const std::vector<SymInt> &base = n.operand(0)->meta().sizes;
  const ir::Attribute *dimAttr = n.attr("dim");
  Region r;
  r.dim = wrapDim(dimAttr ? dimAttr->toInt() : 0, static_cast<int64_t>(base.size()));
  r.select = select;
  if (select) {
    r.start = normalizeIndex(n.attr("index")->toSymInt(), base[r.dim], false);
    return r;
  }
  const ir::Attribute *startAttr = n.attr("start"), *stepAttr = n.attr("step");
  r.start = normalizeIndex(startAttr ? startAttr->toSymInt() : SymInt(0), base[r.dim], true);
  r.step = stepAttr ? stepAttr->toInt() : 1;
  r.len = n.op() == OpKind::Slice ? n.result(0)->meta().sizes[r.dim]
                                  : n.operand(1)->meta().sizes[r.dim];
  return r;
}

ComposedScatter composeScatter(const ir::Node &n) {
  ComposedScatter out;
  out.levels.push_back(*regionOf(n));
  const ir::Value *src = n.operand(1), *viewed = n.operand(0);
  while (isScatter(*src->definingNode())) {
    const ir::Node &inner = *src->definingNode();
    const ir::Node &view = *inner.operand(0)->definingNode();
    std::optional<Region> through = regionOf(view), written = regionOf(inner);
    if (isScatter(view) || !through || view.operand(0) != viewed ||
        !(*through == out.levels.back()) || written->len == SymInt(0))
      break;
    out.levels.push_back(*written);
    out.levelTypes.push_back(inner.result(0)->meta().dtype);
    if (!out.firstView)
      out.firstView = &view;
    viewed = inner.operand(0);
    src = inner.operand(1);
  }
  out.source = src;
  return out;
}

} // namespace kiln::passes::lower
