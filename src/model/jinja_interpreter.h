// The tree-walking evaluator behind Template::Render (internal to sovai_model_template).
// jinja.cc holds statements, expressions and operators; jinja_filters.cc the filters,
// jinja_methods.cc the methods of str/dict/list, jinja_builtins.cc the tests and global
// functions. See jinja.h for the contract.
//
// Thread-safety: one Interpreter per render, used by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/jinja.h"
#include "model/jinja_lexer.h"
#include "model/jinja_parser.h"
#include "model/jinja_value.h"

namespace sovai::model::jinja {

struct Template::Compiled {
  SourceMap map;
  Program program;
};

// Variables of one frame: the render context, a loop iteration, a macro call. Lookups walk up
// the parents. Shared because macros keep the scope they were defined in.
struct Scope {
  std::shared_ptr<Scope> parent;
  ValueDict vars;
};
using ScopePtr = std::shared_ptr<Scope>;

// --- Callables ---

class BuiltinFunction : public Callable {
 public:
  enum class Id : uint8_t { kRange, kNamespace, kDict, kRaiseException, kStrftimeNow };
  explicit BuiltinFunction(Id id) : id(id) {}
  std::string name() const override;
  const Id id;
};

// `"text".strip`, `messages.items`: a method bound to its receiver.
class BoundMethod : public Callable {
 public:
  BoundMethod(Value receiver, std::string method)
      : receiver(std::move(receiver)), method(std::move(method)) {}
  std::string name() const override;
  const Value receiver;
  const std::string method;
};

class MacroFunction : public Callable {
 public:
  MacroFunction(const Stmt* definition, ScopePtr closure)
      : definition(definition), closure(std::move(closure)) {}
  std::string name() const override;
  const Stmt* const definition;  // kMacro or kCallBlock (then it is `caller`)
  const ScopePtr closure;
};

// loop.cycle('odd', 'even') of the current iteration.
class LoopCycle : public Callable {
 public:
  explicit LoopCycle(int64_t index0) : index0(index0) {}
  std::string name() const override { return "loop.cycle"; }
  const int64_t index0;
};

// Positional and keyword arguments matched against named parameters, Python style.
struct BoundArgs {
  std::vector<std::optional<Value>> slots;
  const Value* Get(size_t i) const { return slots[i] ? &*slots[i] : nullptr; }
};

enum class Flow : uint8_t { kNormal, kBreak, kContinue };

class Interpreter {
 public:
  Interpreter(const Template::Compiled& compiled, const RenderOptions& options)
      : compiled_(compiled), options_(options), limits_(options.limits) {}
  // Breaks the reference cycles a render can build (see BreakCycles).
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  base::Result<RenderResult> Run(const ValueDict& context);

  // --- Shared with the builtins ---

  // "template error at L:C: <what>" (InvalidArgument).
  base::Status Error(uint32_t offset, const std::string& what) const;
  base::Status LimitError(uint32_t offset, const std::string& what) const;
  base::Status UnsupportedError(uint32_t offset, const std::string& what) const;
  // The error for using an undefined value where Jinja raises UndefinedError.
  base::Status UndefinedError(const Value& v, uint32_t offset) const;

  // Fails for a string, list or dict past the size/depth limits.
  base::Status CheckValue(const Value& v, uint32_t offset) const;
  base::Result<Value> MakeString(std::string s, uint32_t offset) const;
  base::Result<Value> MakeList(ValueList items, uint32_t offset, bool tuple = false) const;
  // str(v), within the output limit.
  base::Result<std::string> Str(const Value& v, uint32_t offset) const;
  // Counts work (evaluated nodes, compared items); fails past max_steps.
  base::Status Charge(uint64_t steps, uint32_t offset);

  base::Result<ValueList> Iterate(const Value& v, uint32_t offset);
  base::Result<Value> GetAttr(const Value& obj, const std::string& name, uint32_t offset);
  base::Result<Value> GetItem(const Value& obj, const Value& key, uint32_t offset);
  base::Result<Value> Call(const Value& callee, CallArgs args, uint32_t offset);
  base::Result<bool> Contains(const Value& container, const Value& needle, uint32_t offset);
  base::Result<bool> Compare(CompareOp op, const Value& a, const Value& b, uint32_t offset);
  base::Result<Value> Binary(BinaryOp op, const Value& a, const Value& b, uint32_t offset);
  // Python ==, charging the comparison's work.
  base::Result<bool> Eq(const Value& a, const Value& b, uint32_t offset);

  // Matches `args` to parameters `names` of `function` (for messages).
  base::Result<BoundArgs> Bind(const CallArgs& args, std::initializer_list<std::string_view> names,
                               std::string_view function, uint32_t offset) const;

  // Filters (jinja_filters.cc), tests, methods (jinja_methods.cc), global functions.
  base::Result<Value> ApplyFilter(const std::string& name, const Value& operand, CallArgs args,
                                  uint32_t offset);
  base::Result<bool> ApplyTest(const std::string& name, const Value& operand, CallArgs args,
                               uint32_t offset);
  base::Result<Value> CallMethod(const BoundMethod& method, CallArgs args, uint32_t offset);
  base::Result<Value> CallBuiltin(const BuiltinFunction& fn, CallArgs args, uint32_t offset);
  // Whether `receiver.name` is a method the interpreter implements.
  static bool HasMethod(const Value& receiver, std::string_view name);
  // Whether filter `name` has an implementation (every name IsKnownFilter accepts has one).
  static bool HasFilter(std::string_view name);

  const RenderLimits& limits() const { return limits_; }
  // Remembers a namespace() made by this render, to clear it at the end.
  void TrackNamespace(const Value& ns) { namespaces_.push_back(ns); }

 private:
  base::Result<Flow> ExecBody(const Body& body, const ScopePtr& scope, std::string* out);
  base::Result<Flow> ExecStmt(const Stmt& stmt, const ScopePtr& scope, std::string* out);
  base::Result<Flow> ExecFor(const Stmt& stmt, const ScopePtr& scope, std::string* out);
  base::Result<Value> Eval(const Expr& expr, const ScopePtr& scope);
  base::Result<Value> EvalInner(const Expr& expr, const ScopePtr& scope);
  base::Result<CallArgs> EvalArgs(const Expr& expr, const ScopePtr& scope);
  base::Result<Value> EvalSlice(const Expr& expr, const ScopePtr& scope);
  Value Lookup(const std::string& name, const Scope& scope);
  base::Status Assign(const Target& target, const Value& value, const ScopePtr& scope,
                      uint32_t offset);
  base::Status Append(std::string* out, std::string_view text, uint32_t offset);
  base::Result<Value> CallMacro(const MacroFunction& macro, CallArgs args, uint32_t offset);
  base::Result<std::string> ApplyFilterChain(const std::vector<ExprPtr>& filters, std::string text,
                                             const ScopePtr& scope);

  friend class DepthGuard;

  const Template::Compiled& compiled_;
  const RenderOptions& options_;
  const RenderLimits limits_;
  std::string root_out_;
  std::vector<GenerationSpan> spans_;
  uint64_t steps_ = 0;
  uint64_t loop_iterations_ = 0;
  int depth_ = 0;
  int call_depth_ = 0;
  ValueDict globals_;  // built-in functions, created on first use
  // The only mutable containers, hence the only places a reference cycle can pass through: a
  // scope that a macro captured (it holds the macro, whose closure is the scope), and a
  // namespace (`{% set ns.self = ns %}`). The destructor empties them all.
  std::vector<ScopePtr> captured_scopes_;
  std::vector<Value> namespaces_;
};

}  // namespace sovai::model::jinja
