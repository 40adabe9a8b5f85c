#pragma once
/// The graph IR: a Graph owns Nodes in program order; Nodes define SSA Values.
///
/// Semantics:
/// - SSA: every Value is defined exactly once, by one result of one Node, and every use comes
///   after the definition in the node order. Graph inputs are the results of `input` nodes, which
///   come first; the graph's outputs are the operands of the one `return` node, which comes last.
///   So every value has a defining node, and use lists, DCE and replaceAllUsesWith need no special
///   cases for arguments and results.
/// - Evaluation order is the node order. Pure nodes (trait::Pure) may be reordered, merged or
///   deleted by passes as long as their operands stay defined first; nodes with side effects
///   (in-place ops) keep their relative order.
/// - A Value is a tensor (TensorMeta with symbolic sizes) or a scalar (int, float, bool). Python
///   numbers that an op takes are scalar values; compile-time constants are attributes.
/// - Each node keeps the source location of the user's code that created it (`model.py:12`),
///   printed as `loc("model.py":12)` and carried through passes for diagnostics.
/// - Use lists are maintained by the Graph/Node mutators; a value's uses are (node, operand
///   index) pairs, in no particular order.
/// - Graphs are neither copyable nor movable (nodes point back at their graph); hold them by
///   std::unique_ptr and copy them by printing and parsing.

#include "ir/attribute.h"
#include "ir/op_kind.h"
#include "ir/tensor_meta.h"

#include <list>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kiln::ir {

class Graph;
class Node;

/// Where in the user's program a node came from; line 0 means unknown.
struct SourceLoc {
  std::string file;
  int line = 0;
  bool known() const { return line > 0 || !file.empty(); }
  bool operator==(const SourceLoc &) const = default;
};

/// One use of a value: operand `operandIndex` of `user`.
struct Use {
  Node *user;
  int operandIndex;
  bool operator==(const Use &) const = default;
};

/// An SSA value: result `resultIndex()` of `definingNode()`, typed by a TensorMeta or a scalar
/// type. Owned by its node.
class Value {
public:
  Value(const Value &) = delete;
  Value &operator=(const Value &) = delete;

  /// The node whose result this is (an `input` node for graph inputs).
  Node *definingNode() const { return node_; }
  int resultIndex() const { return index_; }
  const ValueType &type() const { return type_; }
  /// Retypes the value (shape propagation); the verifier checks the result.
  void setType(ValueType type) { type_ = std::move(type); }
  bool isTensor() const { return type_.isTensor(); }
  /// The tensor meta; throws kiln::Error for a scalar value.
  const TensorMeta &meta() const { return type_.meta(); }
  /// A name hint; graph inputs print under it (`%x`).
  const std::string &name() const { return name_; }
  void setName(std::string name) { name_ = std::move(name); }

  /// Every (node, operand index) that reads this value, the `return` node included.
  const std::vector<Use> &uses() const { return uses_; }
  bool hasUses() const { return !uses_.empty(); }
  /// Makes every user of this value use `other` instead.
  void replaceAllUsesWith(Value *other);

private:
  friend class Node;
  friend class Graph;
  Value(Node *node, int index, ValueType type)
      : node_(node), index_(index), type_(std::move(type)) {}
  Node *node_;
  int index_;
  ValueType type_;
  std::string name_;
  std::vector<Use> uses_;
};

/// One operation: an op kind, operand values, attributes, result values and a source location.
/// Owned by its graph; create nodes through Graph.
class Node {
public:
  Node(const Node &) = delete;
  Node &operator=(const Node &) = delete;
  ~Node();

  OpKind op() const { return op_; }
  /// The op's .kir keyword, for messages.
  std::string_view keyword() const { return opKeyword(op_); }
  /// Whether the op has every trait in `t` (see ops.def).
  bool hasTrait(OpTraits t) const { return ir::hasTrait(op_, t); }
  Graph *graph() const { return graph_; }

  std::span<Value *const> operands() const { return operands_; }
  int numOperands() const { return static_cast<int>(operands_.size()); }
  /// Operand `i`; throws kiln::Error (Index) when out of range.
  Value *operand(int i) const;
  /// Replaces operand `i`, keeping both values' use lists current.
  void setOperand(int i, Value *v);
  /// Replaces every operand (the count may change).
  void setOperands(std::vector<Value *> values);

  int numResults() const { return static_cast<int>(results_.size()); }
  /// Result `i`; throws kiln::Error (Index) when out of range.
  Value *result(int i = 0) const;
  std::vector<Value *> results() const;

  /// The attributes, sorted by name; mutable so passes can rewrite them.
  const Attributes &attrs() const { return attrs_; }
  Attributes &attrs() { return attrs_; }
  /// The attribute `name`, or null.
  const Attribute *attr(std::string_view name) const;
  void setAttr(std::string name, Attribute value) { attrs_[std::move(name)] = std::move(value); }

  /// Where in the user's program the node came from.
  const SourceLoc &loc() const { return loc_; }
  void setLoc(SourceLoc loc) { loc_ = std::move(loc); }

private:
  friend class Graph;
  friend class Value;
  Node(Graph *graph, OpKind op, Attributes attrs, SourceLoc loc);
  void addUse(int i);
  void dropUse(int i);

  Graph *graph_;
  OpKind op_;
  std::vector<Value *> operands_;
  std::vector<std::unique_ptr<Value>> results_;
  Attributes attrs_;
  SourceLoc loc_;
  std::list<std::unique_ptr<Node>>::iterator self_;
};

/// A graph: nodes in program order, `input` nodes first and the `return` node last.
class Graph {
public:
  /// An empty graph printed as `graph @name`; the name must be an identifier.
  explicit Graph(std::string name = "main") : name_(std::move(name)) {}
  Graph(const Graph &) = delete;
  Graph &operator=(const Graph &) = delete;
  ~Graph();

  const std::string &name() const { return name_; }
  void setName(std::string name) { name_ = std::move(name); }

  /// Adds a graph input (an `input` node after the existing ones) and returns its value.
  Value *addInput(ValueType type, std::string name = "", SourceLoc loc = {});
  /// Appends a node (before the `return` node, if there is one). Operands must belong to this
  /// graph; arity, attributes and types are the verifier's business, so that tests can build
  /// broken graphs on purpose.
  Node *create(OpKind op, std::vector<Value *> operands, Attributes attrs,
               std::vector<ValueType> resultTypes, SourceLoc loc = {});
  /// Like create, but inserts the node just before `anchor`.
  Node *createBefore(Node *anchor, OpKind op, std::vector<Value *> operands, Attributes attrs,
                     std::vector<ValueType> resultTypes, SourceLoc loc = {});
  /// Sets the graph outputs: creates the `return` node, or resets its operands.
  Node *setOutputs(std::vector<Value *> values, SourceLoc loc = {});

  /// The results of the `input` nodes, in order.
  std::vector<Value *> inputs() const;
  /// The operands of the `return` node (empty when there is none).
  std::vector<Value *> outputs() const;
  /// The `return` node, or null.
  Node *returnNode() const;

  /// Every node in order (a snapshot: erasing nodes while walking it is safe).
  std::vector<Node *> nodes() const;
  size_t numNodes() const { return nodes_.size(); }
  /// Moves `node` to just before `anchor`.
  void moveBefore(Node *node, Node *anchor);
  /// Deletes `node`; throws kiln::Error if one of its results still has uses.
  void erase(Node *node);

private:
  Node *insert(std::list<std::unique_ptr<Node>>::iterator pos, OpKind op,
               std::vector<Value *> operands, Attributes attrs, std::vector<ValueType> resultTypes,
               SourceLoc loc);
  void checkOwned(const Node *node, std::string_view what) const;

  std::string name_;
  std::list<std::unique_ptr<Node>> nodes_;
  Node *return_ = nullptr; ///< the first `return` node, cached: the builder inserts before it
};

} // namespace kiln::ir
