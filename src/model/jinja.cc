// Template parsing and the evaluator core: statements, expressions, operators, attribute and
// item access, calls and macros. Filters, tests, methods and globals are in jinja_builtins.cc.
#include "model/jinja.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/jinja_interpreter.h"
#include "model/jinja_strings.h"

namespace sovai::model::jinja {

// --- Template ---

base::Result<Template> Template::Parse(std::string_view source, const TemplateLimits& limits) {
  if (source.size() > limits.max_template_bytes) {
    return base::ResourceExhaustedError("chat template is " + std::to_string(source.size()) +
                                        " bytes, more than the limit of " +
                                        std::to_string(limits.max_template_bytes));
  }
  size_t bad_offset = 0;
  if (!IsValidUtf8(source, &bad_offset)) {
    return base::InvalidArgumentError("chat template is not valid UTF-8 (byte " +
                                      std::to_string(bad_offset) + ")");
  }
  auto compiled = std::make_shared<Compiled>(Compiled{SourceMap(NormalizeSource(source)), {}});
  SOVAI_ASSIGN_OR_RETURN(std::vector<Token> tokens, Lex(compiled->map));
  ParseLimits parse_limits;
  parse_limits.max_statement_depth = limits.max_statement_depth;
  parse_limits.max_expression_depth = limits.max_expression_depth;
  SOVAI_ASSIGN_OR_RETURN(compiled->program, jinja::Parse(tokens, compiled->map, parse_limits));
  return Template(std::move(compiled));
}

base::Result<std::string> Template::Render(const nlohmann::ordered_json& context,
                                           const RenderOptions& options) const {
  if (!context.is_object()) {
    return base::InvalidArgumentError("template context must be a JSON object of variables");
  }
  SOVAI_ASSIGN_OR_RETURN(Value vars, FromJson(context));
  SOVAI_ASSIGN_OR_RETURN(RenderResult result, RenderValues(vars.dict(), options));
  return std::move(result.text);
}

base::Result<RenderResult> Template::RenderValues(const ValueDict& context,
                                                  const RenderOptions& options) const {
  Interpreter interpreter(*compiled_, options);
  return interpreter.Run(context);
}

bool Template::uses_generation() const { return compiled_->program.uses_generation; }
const std::string& Template::source() const { return compiled_->map.source(); }

// --- Callable names ---

std::string BuiltinFunction::name() const {
  switch (id) {
    case Id::kRange:
      return "range";
    case Id::kNamespace:
      return "namespace";
    case Id::kDict:
      return "dict";
    case Id::kRaiseException:
      return "raise_exception";
    case Id::kStrftimeNow:
      return "strftime_now";
  }
  return "?";
}

std::string BoundMethod::name() const { return std::string(TypeName(receiver)) + "." + method; }

std::string MacroFunction::name() const {
  if (definition->kind == Stmt::Kind::kCallBlock) return "caller";
  return "macro '" + definition->text + "'";
}

// --- Interpreter: plumbing ---

class DepthGuard {
 public:
  explicit DepthGuard(Interpreter* interpreter) : interpreter_(interpreter) {
    ++interpreter_->depth_;
  }
  ~DepthGuard() { --interpreter_->depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;
  bool ok() const { return interpreter_->depth_ <= interpreter_->limits_.max_evaluation_depth; }

 private:
  Interpreter* interpreter_;
};

base::Status Interpreter::Error(uint32_t offset, const std::string& what) const {
  return base::InvalidArgumentError("template error at " + compiled_.map.Describe(offset) + ": " +
                                    what);
}

base::Status Interpreter::LimitError(uint32_t offset, const std::string& what) const {
  return base::ResourceExhaustedError("template limit reached at " +
                                      compiled_.map.Describe(offset) + ": " + what);
}

base::Status Interpreter::UnsupportedError(uint32_t offset, const std::string& what) const {
  return base::UnimplementedError("unsupported Jinja construct at " +
                                  compiled_.map.Describe(offset) + ": " + what);
}

base::Status Interpreter::UndefinedError(const Value& v, uint32_t offset) const {
  std::string hint(v.undefined_hint());
  if (hint.empty()) hint = "value is undefined";
  return Error(offset, hint);
}

base::Status Interpreter::CheckValue(const Value& v, uint32_t offset) const {
  if (v.depth() > kMaxValueDepth) {
    return LimitError(offset,
                      "value nests deeper than " + std::to_string(kMaxValueDepth) + " levels");
  }
  if (v.weight() > limits_.max_output_bytes) {
    return LimitError(offset, "value is larger than max_output_bytes (" +
                                  std::to_string(limits_.max_output_bytes) + ")");
  }
  return {};
}

base::Result<Value> Interpreter::MakeString(std::string s, uint32_t offset) const {
  if (s.size() > limits_.max_output_bytes) {
    return LimitError(offset, "string is longer than max_output_bytes (" +
                                  std::to_string(limits_.max_output_bytes) + ")");
  }
  return Value::String(std::move(s));
}

base::Result<Value> Interpreter::MakeList(ValueList items, uint32_t offset, bool tuple) const {
  Value v = tuple ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
  SOVAI_RETURN_IF_ERROR(CheckValue(v, offset));
  return v;
}

base::Result<std::string> Interpreter::Str(const Value& v, uint32_t offset) const {
  std::string out;
  if (!AppendPyStr(v, limits_.max_output_bytes, &out)) {
    return LimitError(offset, "string is longer than max_output_bytes (" +
                                  std::to_string(limits_.max_output_bytes) + ")");
  }
  return out;
}

base::Status Interpreter::Charge(uint64_t steps, uint32_t offset) {
  steps_ += steps;
  if (steps_ > limits_.max_steps) {
    return LimitError(offset, "evaluation took more than " + std::to_string(limits_.max_steps) +
                                  " steps (max_steps)");
  }
  return {};
}

base::Status Interpreter::Append(std::string* out, std::string_view text, uint32_t offset) {
  if (out->size() + text.size() > limits_.max_output_bytes) {
    return LimitError(offset, "output is longer than max_output_bytes (" +
                                  std::to_string(limits_.max_output_bytes) + ")");
  }
  out->append(text);
  return {};
}

base::Result<BoundArgs> Interpreter::Bind(const CallArgs& args,
                                          std::initializer_list<std::string_view> names,
                                          std::string_view function, uint32_t offset) const {
  BoundArgs bound;
  bound.slots.resize(names.size());
  if (args.positional.size() > names.size()) {
    return Error(offset, std::string(function) + "() takes at most " +
                             std::to_string(names.size()) + " argument(s) (" +
                             std::to_string(args.positional.size()) + " given)");
  }
  for (size_t i = 0; i < args.positional.size(); ++i) bound.slots[i] = args.positional[i];
  for (const auto& [key, value] : args.keyword) {
    auto it = std::find(names.begin(), names.end(), key);
    if (it == names.end()) {
      return Error(offset,
                   std::string(function) + "() got an unexpected keyword argument '" + key + "'");
    }
    size_t i = static_cast<size_t>(it - names.begin());
    if (bound.slots[i]) {
      return Error(offset,
                   std::string(function) + "() got multiple values for argument '" + key + "'");
    }
    bound.slots[i] = value;
  }
  return bound;
}

// --- Running ---

Interpreter::~Interpreter() {
  // Values cannot leave a render (it returns text), so emptying these containers is safe, and it
  // releases every cycle that went through them.
  for (const ScopePtr& scope : captured_scopes_) scope->vars = ValueDict();
  for (const Value& ns : namespaces_) ns.namespace_attrs() = ValueDict();
}

base::Result<RenderResult> Interpreter::Run(const ValueDict& context) {
  auto root = std::make_shared<Scope>();
  root->vars = context;
  // Template-level {% set %} goes one level below the context, so it shadows a variable
  // without changing the caller's values.
  auto scope = std::make_shared<Scope>();
  scope->parent = root;
  SOVAI_ASSIGN_OR_RETURN(Flow flow, ExecBody(compiled_.program.body, scope, &root_out_));
  (void)flow;  // the parser rejects break/continue outside loops
  RenderResult result;
  result.text = std::move(root_out_);
  result.generation_spans = std::move(spans_);
  return result;
}

base::Result<Flow> Interpreter::ExecBody(const Body& body, const ScopePtr& scope,
                                         std::string* out) {
  for (const StmtPtr& stmt : body) {
    SOVAI_ASSIGN_OR_RETURN(Flow flow, ExecStmt(*stmt, scope, out));
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

base::Result<std::string> Interpreter::ApplyFilterChain(const std::vector<ExprPtr>& filters,
                                                        std::string text, const ScopePtr& scope) {
  Value v = Value::String(std::move(text));
  for (const ExprPtr& f : filters) {
    SOVAI_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(*f, scope));
    SOVAI_ASSIGN_OR_RETURN(v, ApplyFilter(f->name, v, std::move(args), f->offset));
  }
  return Str(v, filters.empty() ? 0 : filters.back()->offset);
}

base::Result<Flow> Interpreter::ExecStmt(const Stmt& stmt, const ScopePtr& scope,
                                         std::string* out) {
  DepthGuard guard(this);
  if (!guard.ok()) {
    return LimitError(stmt.offset, "evaluation nests deeper than " +
                                       std::to_string(limits_.max_evaluation_depth) + " levels");
  }
  SOVAI_RETURN_IF_ERROR(Charge(1, stmt.offset));
  switch (stmt.kind) {
    case Stmt::Kind::kText:
      SOVAI_RETURN_IF_ERROR(Append(out, stmt.text, stmt.offset));
      return Flow::kNormal;
    case Stmt::Kind::kOutput: {
      SOVAI_ASSIGN_OR_RETURN(Value v, Eval(*stmt.expr, scope));
      if (!AppendPyStr(v, limits_.max_output_bytes, out)) {
        return LimitError(stmt.offset, "output is longer than max_output_bytes (" +
                                           std::to_string(limits_.max_output_bytes) + ")");
      }
      return Flow::kNormal;
    }
    case Stmt::Kind::kIf:
      for (const auto& [cond, body] : stmt.branches) {
        SOVAI_ASSIGN_OR_RETURN(Value c, Eval(*cond, scope));
        if (Truthy(c)) return ExecBody(body, scope, out);
      }
      return ExecBody(stmt.else_body, scope, out);
    case Stmt::Kind::kFor:
      return ExecFor(stmt, scope, out);
    case Stmt::Kind::kSet: {
      SOVAI_ASSIGN_OR_RETURN(Value v, Eval(*stmt.expr, scope));
      SOVAI_RETURN_IF_ERROR(Assign(stmt.target, v, scope, stmt.offset));
      return Flow::kNormal;
    }
    case Stmt::Kind::kSetBlock:
    case Stmt::Kind::kFilterBlock: {
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      std::string buffer;
      SOVAI_ASSIGN_OR_RETURN(Flow flow, ExecBody(stmt.body, inner, &buffer));
      if (flow != Flow::kNormal) {
        return Error(stmt.offset, "break/continue cannot leave a set or filter block");
      }
      SOVAI_ASSIGN_OR_RETURN(std::string text,
                             ApplyFilterChain(stmt.filters, std::move(buffer), scope));
      if (stmt.kind == Stmt::Kind::kFilterBlock) {
        SOVAI_RETURN_IF_ERROR(Append(out, text, stmt.offset));
      } else {
        SOVAI_RETURN_IF_ERROR(
            Assign(stmt.target, Value::String(std::move(text)), scope, stmt.offset));
      }
      return Flow::kNormal;
    }
    case Stmt::Kind::kMacro:
      captured_scopes_.push_back(scope);
      scope->vars.Set(stmt.text, Value::Function(std::make_shared<MacroFunction>(&stmt, scope)));
      return Flow::kNormal;
    case Stmt::Kind::kCallBlock: {
      const Expr& call = *stmt.expr;
      SOVAI_ASSIGN_OR_RETURN(Value callee, Eval(*call.a, scope));
      SOVAI_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(call, scope));
      captured_scopes_.push_back(scope);
      args.keyword.emplace_back("caller",
                                Value::Function(std::make_shared<MacroFunction>(&stmt, scope)));
      SOVAI_ASSIGN_OR_RETURN(Value result, Call(callee, std::move(args), call.offset));
      if (!AppendPyStr(result, limits_.max_output_bytes, out)) {
        return LimitError(stmt.offset, "output is longer than max_output_bytes (" +
                                           std::to_string(limits_.max_output_bytes) + ")");
      }
      return Flow::kNormal;
    }
    case Stmt::Kind::kBreak:
      return Flow::kBreak;
    case Stmt::Kind::kContinue:
      return Flow::kContinue;
    case Stmt::Kind::kGeneration: {
      if (out != &root_out_) {
        return Error(stmt.offset,
                     "{% generation %} must be at the top level of the template, not inside a "
                     "macro, call, set or filter block");
      }
      const size_t begin = out->size();
      SOVAI_ASSIGN_OR_RETURN(Flow flow, ExecBody(stmt.body, scope, out));
      spans_.push_back(GenerationSpan{begin, out->size()});
      return flow;
    }
  }
  return Flow::kNormal;
}

base::Result<Flow> Interpreter::ExecFor(const Stmt& stmt, const ScopePtr& scope, std::string* out) {
  SOVAI_ASSIGN_OR_RETURN(Value iterable, Eval(*stmt.expr, scope));
  SOVAI_ASSIGN_OR_RETURN(ValueList items, Iterate(iterable, stmt.expr->offset));
  auto count_iterations = [&](size_t n) -> base::Status {
    loop_iterations_ += n;
    if (loop_iterations_ > limits_.max_loop_iterations) {
      return LimitError(stmt.offset, "loops ran more than " +
                                         std::to_string(limits_.max_loop_iterations) +
                                         " iterations (max_loop_iterations)");
    }
    return {};
  };
  if (stmt.cond) {
    SOVAI_RETURN_IF_ERROR(count_iterations(items.size()));
    ValueList kept;
    for (Value& item : items) {
      auto probe = std::make_shared<Scope>();
      probe->parent = scope;
      SOVAI_RETURN_IF_ERROR(Assign(stmt.target, item, probe, stmt.offset));
      SOVAI_ASSIGN_OR_RETURN(Value keep, Eval(*stmt.cond, probe));
      if (Truthy(keep)) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  SOVAI_RETURN_IF_ERROR(count_iterations(items.size()));
  if (items.empty()) {
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    return ExecBody(stmt.else_body, inner, out);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    // A fresh scope per iteration: Jinja resets variables set in the body at each iteration.
    auto iteration = std::make_shared<Scope>();
    iteration->parent = scope;
    ValueDict loop;
    loop.Set("index", Value::Int(i + 1));
    loop.Set("index0", Value::Int(i));
    loop.Set("revindex", Value::Int(n - i));
    loop.Set("revindex0", Value::Int(n - i - 1));
    loop.Set("first", Value::Bool(i == 0));
    loop.Set("last", Value::Bool(i == n - 1));
    loop.Set("length", Value::Int(n));
    loop.Set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)]
                               : Value::Undefined("there is no previous item"));
    loop.Set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)]
                                   : Value::Undefined("there is no next item"));
    loop.Set("depth", Value::Int(1));
    loop.Set("depth0", Value::Int(0));
    loop.Set("cycle", Value::Function(std::make_shared<LoopCycle>(i)));
    iteration->vars.Set("loop", Value::Dict(std::move(loop)));
    SOVAI_RETURN_IF_ERROR(
        Assign(stmt.target, items[static_cast<size_t>(i)], iteration, stmt.offset));
    SOVAI_ASSIGN_OR_RETURN(Flow flow, ExecBody(stmt.body, iteration, out));
    if (flow == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

base::Status Interpreter::Assign(const Target& target, const Value& value, const ScopePtr& scope,
                                 uint32_t offset) {
  if (!target.attribute.empty()) {
    Value ns = Lookup(target.names[0], *scope);
    if (!ns.is_namespace()) {
      return Error(offset, "cannot assign attribute '" + target.attribute + "' of '" +
                               target.names[0] + "', which is a " + std::string(TypeName(ns)) +
                               ", not a namespace()");
    }
    ns.namespace_attrs().Set(target.attribute, value);
    return {};
  }
  if (!target.is_tuple) {
    scope->vars.Set(target.names[0], value);
    return {};
  }
  SOVAI_ASSIGN_OR_RETURN(ValueList items, Iterate(value, offset));
  if (items.size() != target.names.size()) {
    return Error(offset, (items.size() < target.names.size() ? "not enough" : "too many") +
                             std::string(" values to unpack (expected ") +
                             std::to_string(target.names.size()) + ", got " +
                             std::to_string(items.size()) + ")");
  }
  for (size_t i = 0; i < items.size(); ++i) scope->vars.Set(target.names[i], items[i]);
  return {};
}

Value Interpreter::Lookup(const std::string& name, const Scope& scope) {
  for (const Scope* s = &scope; s != nullptr; s = s->parent.get()) {
    if (const Value* v = s->vars.Find(name)) return *v;
  }
  if (const Value* v = globals_.Find(name)) return *v;
  static constexpr std::pair<std::string_view, BuiltinFunction::Id> kGlobals[] = {
      {"range", BuiltinFunction::Id::kRange},
      {"namespace", BuiltinFunction::Id::kNamespace},
      {"dict", BuiltinFunction::Id::kDict},
      {"raise_exception", BuiltinFunction::Id::kRaiseException},
      {"strftime_now", BuiltinFunction::Id::kStrftimeNow},
  };
  for (const auto& [global, id] : kGlobals) {
    if (global == name) {
      Value fn = Value::Function(std::make_shared<BuiltinFunction>(id));
      globals_.Set(name, fn);
      return fn;
    }
  }
  return Value::Undefined("'" + name + "' is undefined");
}

// --- Expressions ---

base::Result<Value> Interpreter::Eval(const Expr& expr, const ScopePtr& scope) {
  DepthGuard guard(this);
  if (!guard.ok()) {
    return LimitError(expr.offset, "evaluation nests deeper than " +
                                       std::to_string(limits_.max_evaluation_depth) + " levels");
  }
  SOVAI_RETURN_IF_ERROR(Charge(1, expr.offset));
  return EvalInner(expr, scope);
}

base::Result<CallArgs> Interpreter::EvalArgs(const Expr& expr, const ScopePtr& scope) {
  CallArgs args;
  args.positional.reserve(expr.items.size());
  for (const ExprPtr& item : expr.items) {
    SOVAI_ASSIGN_OR_RETURN(Value v, Eval(*item, scope));
    args.positional.push_back(std::move(v));
  }
  for (const auto& [key, item] : expr.keyword) {
    SOVAI_ASSIGN_OR_RETURN(Value v, Eval(*item, scope));
    args.keyword.emplace_back(key, std::move(v));
  }
  return args;
}

base::Result<Value> Interpreter::EvalSlice(const Expr& expr, const ScopePtr& scope) {
  SOVAI_ASSIGN_OR_RETURN(Value obj, Eval(*expr.a, scope));
  if (obj.is_undefined()) return UndefinedError(obj, expr.offset);
  std::optional<int64_t> bounds[3];
  const Expr* parts[3] = {expr.b.get(), expr.c.get(), expr.d.get()};
  for (int i = 0; i < 3; ++i) {
    if (parts[i] == nullptr) continue;
    SOVAI_ASSIGN_OR_RETURN(Value v, Eval(*parts[i], scope));
    if (v.is_none()) continue;
    if (!IsIntLike(v)) {
      return Error(parts[i]->offset,
                   "slice indices must be integers or none, not " + std::string(TypeName(v)));
    }
    bounds[i] = AsInt(v);
  }
  if (bounds[2] && *bounds[2] == 0) return Error(expr.offset, "slice step cannot be zero");
  if (obj.is_string()) {
    std::u32string cps = DecodeUtf8(obj.string_value());
    SliceBounds b = ResolveSlice(bounds[0], bounds[1], bounds[2], static_cast<int64_t>(cps.size()));
    std::u32string out;
    const int64_t n = SliceLength(b);
    for (int64_t k = 0, i = b.start; k < n; ++k, i += b.step)
      out.push_back(cps[static_cast<size_t>(i)]);
    return Value::String(EncodeUtf8(out));
  }
  if (obj.is_list()) {
    const ValueList& items = obj.list_items();
    SliceBounds b =
        ResolveSlice(bounds[0], bounds[1], bounds[2], static_cast<int64_t>(items.size()));
    ValueList out;
    const int64_t n = SliceLength(b);
    out.reserve(static_cast<size_t>(n));
    for (int64_t k = 0, i = b.start; k < n; ++k, i += b.step)
      out.push_back(items[static_cast<size_t>(i)]);
    SOVAI_RETURN_IF_ERROR(Charge(static_cast<uint64_t>(n), expr.offset));
    return obj.is_tuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
  }
  // Jinja's getitem turns the TypeError of slicing a dict or a number into undefined.
  return Value::Undefined("'" + std::string(TypeName(obj)) + " object' cannot be sliced");
}

base::Result<Value> Interpreter::EvalInner(const Expr& expr, const ScopePtr& scope) {
  switch (expr.kind) {
    case Expr::Kind::kLiteral:
      return expr.literal;
    case Expr::Kind::kName:
      return Lookup(expr.name, *scope);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      ValueList items;
      items.reserve(expr.items.size());
      for (const ExprPtr& item : expr.items) {
        SOVAI_ASSIGN_OR_RETURN(Value v, Eval(*item, scope));
        items.push_back(std::move(v));
      }
      return MakeList(std::move(items), expr.offset, expr.kind == Expr::Kind::kTuple);
    }
    case Expr::Kind::kDict: {
      ValueDict dict;
      for (size_t i = 0; i < expr.items.size(); ++i) {
        SOVAI_ASSIGN_OR_RETURN(Value key, Eval(*expr.items[i], scope));
        if (!key.is_string()) {
          return Error(expr.items[i]->offset, "dict keys must be strings in chat templates, not " +
                                                  std::string(TypeName(key)));
        }
        SOVAI_ASSIGN_OR_RETURN(Value value, Eval(*expr.values[i], scope));
        dict.Set(key.string_value(), std::move(value));
      }
      Value v = Value::Dict(std::move(dict));
      SOVAI_RETURN_IF_ERROR(CheckValue(v, expr.offset));
      return v;
    }
    case Expr::Kind::kAttr: {
      SOVAI_ASSIGN_OR_RETURN(Value obj, Eval(*expr.a, scope));
      return GetAttr(obj, expr.name, expr.offset);
    }
    case Expr::Kind::kItem: {
      SOVAI_ASSIGN_OR_RETURN(Value obj, Eval(*expr.a, scope));
      SOVAI_ASSIGN_OR_RETURN(Value key, Eval(*expr.b, scope));
      return GetItem(obj, key, expr.offset);
    }
    case Expr::Kind::kSlice:
      return EvalSlice(expr, scope);
    case Expr::Kind::kCall: {
      SOVAI_ASSIGN_OR_RETURN(Value callee, Eval(*expr.a, scope));
      SOVAI_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(expr, scope));
      return Call(callee, std::move(args), expr.offset);
    }
    case Expr::Kind::kFilter: {
      SOVAI_ASSIGN_OR_RETURN(Value operand, Eval(*expr.a, scope));
      SOVAI_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(expr, scope));
      return ApplyFilter(expr.name, operand, std::move(args), expr.offset);
    }
    case Expr::Kind::kTest: {
      SOVAI_ASSIGN_OR_RETURN(Value operand, Eval(*expr.a, scope));
      SOVAI_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(expr, scope));
      SOVAI_ASSIGN_OR_RETURN(bool result,
                             ApplyTest(expr.name, operand, std::move(args), expr.offset));
      return Value::Bool(result != expr.negated);
    }
    case Expr::Kind::kNeg:
    case Expr::Kind::kPos: {
      SOVAI_ASSIGN_OR_RETURN(Value v, Eval(*expr.a, scope));
      if (v.is_undefined()) return UndefinedError(v, expr.offset);
      const bool neg = expr.kind == Expr::Kind::kNeg;
      if (IsIntLike(v)) {
        int64_t i = AsInt(v);
        if (!neg) return Value::Int(i);
        if (i == std::numeric_limits<int64_t>::min()) return Error(expr.offset, "integer overflow");
        return Value::Int(-i);
      }
      if (v.is_float()) return Value::Float(neg ? -v.float_value() : v.float_value());
      return Error(expr.offset, std::string("bad operand type for unary ") + (neg ? "-" : "+") +
                                    ": '" + std::string(TypeName(v)) + "'");
    }
    case Expr::Kind::kNot: {
      SOVAI_ASSIGN_OR_RETURN(Value v, Eval(*expr.a, scope));
      return Value::Bool(!Truthy(v));
    }
    case Expr::Kind::kBinary: {
      SOVAI_ASSIGN_OR_RETURN(Value left, Eval(*expr.a, scope));
      // `and` / `or` return an operand, as in Python.
      if (expr.op == BinaryOp::kAnd) {
        if (!Truthy(left)) return left;
        return Eval(*expr.b, scope);
      }
      if (expr.op == BinaryOp::kOr) {
        if (Truthy(left)) return left;
        return Eval(*expr.b, scope);
      }
      SOVAI_ASSIGN_OR_RETURN(Value right, Eval(*expr.b, scope));
      return Binary(expr.op, left, right, expr.offset);
    }
    case Expr::Kind::kCompare: {
      SOVAI_ASSIGN_OR_RETURN(Value left, Eval(*expr.a, scope));
      for (size_t i = 0; i < expr.compare_ops.size(); ++i) {
        SOVAI_ASSIGN_OR_RETURN(Value right, Eval(*expr.items[i], scope));
        SOVAI_ASSIGN_OR_RETURN(bool holds,
                               Compare(expr.compare_ops[i], left, right, expr.items[i]->offset));
        if (!holds) return Value::Bool(false);
        left = std::move(right);
      }
      return Value::Bool(true);
    }
    case Expr::Kind::kCond: {
      SOVAI_ASSIGN_OR_RETURN(Value cond, Eval(*expr.a, scope));
      if (Truthy(cond)) return Eval(*expr.b, scope);
      if (expr.c) return Eval(*expr.c, scope);
      return Value::Undefined("the inline if-expression has no else branch");
    }
  }
  return Error(expr.offset, "unknown expression");
}

// --- Access ---

namespace {

std::string NoAttribute(const Value& obj, std::string_view name) {
  return "'" + std::string(TypeName(obj)) + " object' has no attribute '" + std::string(name) + "'";
}

}  // namespace

base::Result<Value> Interpreter::GetAttr(const Value& obj, const std::string& name,
                                         uint32_t offset) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      return UndefinedError(obj, offset);
    case Value::Kind::kDict:
      // Jinja's getattr tries the Python attribute (a method) before the key.
      if (HasMethod(obj, name)) return Value::Function(std::make_shared<BoundMethod>(obj, name));
      if (const Value* v = obj.dict().Find(name)) return *v;
      return Value::Undefined(NoAttribute(obj, name));
    case Value::Kind::kNamespace:
      if (const Value* v = obj.namespace_attrs().Find(name)) return *v;
      return Value::Undefined(NoAttribute(obj, name));
    case Value::Kind::kString:
    case Value::Kind::kList:
      if (HasMethod(obj, name)) return Value::Function(std::make_shared<BoundMethod>(obj, name));
      return Value::Undefined(NoAttribute(obj, name));
    default:
      return Value::Undefined(NoAttribute(obj, name));
  }
}

base::Result<Value> Interpreter::GetItem(const Value& obj, const Value& key, uint32_t offset) {
  if (obj.is_undefined()) return UndefinedError(obj, offset);
  auto no_element = [&] {
    return Value::Undefined("'" + std::string(TypeName(obj)) + " object' has no element " +
                            ToPyRepr(key));
  };
  switch (obj.kind()) {
    case Value::Kind::kDict:
      if (key.is_string()) {
        if (const Value* v = obj.dict().Find(key.string_value())) return *v;
        if (HasMethod(obj, key.string_value())) {
          return Value::Function(std::make_shared<BoundMethod>(obj, key.string_value()));
        }
        return Value::Undefined(NoAttribute(obj, key.string_value()));
      }
      return no_element();
    case Value::Kind::kNamespace:
      if (key.is_string()) {
        if (const Value* v = obj.namespace_attrs().Find(key.string_value())) return *v;
      }
      return no_element();
    case Value::Kind::kList:
    case Value::Kind::kString: {
      if (key.is_string()) {
        if (HasMethod(obj, key.string_value())) {
          return Value::Function(std::make_shared<BoundMethod>(obj, key.string_value()));
        }
        return Value::Undefined(NoAttribute(obj, key.string_value()));
      }
      if (!IsIntLike(key)) return no_element();
      int64_t i = AsInt(key);
      if (obj.is_list()) {
        const int64_t n = static_cast<int64_t>(obj.list_items().size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return no_element();
        return obj.list_items()[static_cast<size_t>(i)];
      }
      std::u32string cps = DecodeUtf8(obj.string_value());
      const int64_t n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return no_element();
      std::string ch;
      base::AppendUtf8(&ch, cps[static_cast<size_t>(i)]);
      return Value::String(std::move(ch));
    }
    default:
      return no_element();
  }
}

base::Result<ValueList> Interpreter::Iterate(const Value& v, uint32_t offset) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return ValueList{};
    case Value::Kind::kList:
      SOVAI_RETURN_IF_ERROR(Charge(v.list_items().size(), offset));
      return v.list_items();
    case Value::Kind::kString: {
      ValueList out;
      std::u32string cps = DecodeUtf8(v.string_value());
      SOVAI_RETURN_IF_ERROR(Charge(cps.size(), offset));
      out.reserve(cps.size());
      for (char32_t cp : cps) {
        std::string ch;
        base::AppendUtf8(&ch, cp);
        out.push_back(Value::String(std::move(ch)));
      }
      return out;
    }
    case Value::Kind::kDict: {
      ValueList out;
      SOVAI_RETURN_IF_ERROR(Charge(v.dict().size(), offset));
      out.reserve(v.dict().size());
      for (const auto& [k, item] : v.dict().items()) out.push_back(Value::String(k));
      return out;
    }
    default:
      return Error(offset, "'" + std::string(TypeName(v)) + "' object is not iterable");
  }
}

// --- Calls ---

base::Result<Value> Interpreter::Call(const Value& callee, CallArgs args, uint32_t offset) {
  if (callee.is_undefined()) return UndefinedError(callee, offset);
  if (!callee.is_callable()) {
    return Error(offset, "'" + std::string(TypeName(callee)) + "' object is not callable");
  }
  const Callable& c = callee.callable();
  if (const auto* fn = dynamic_cast<const BuiltinFunction*>(&c)) {
    return CallBuiltin(*fn, std::move(args), offset);
  }
  if (const auto* method = dynamic_cast<const BoundMethod*>(&c)) {
    return CallMethod(*method, std::move(args), offset);
  }
  if (const auto* macro = dynamic_cast<const MacroFunction*>(&c)) {
    return CallMacro(*macro, std::move(args), offset);
  }
  if (const auto* cycle = dynamic_cast<const LoopCycle*>(&c)) {
    if (!args.keyword.empty()) return Error(offset, "loop.cycle() takes no keyword arguments");
    if (args.positional.empty()) return Error(offset, "no items for cycling given");
    return args.positional[static_cast<size_t>(cycle->index0) % args.positional.size()];
  }
  return Error(offset, "'" + c.name() + "' cannot be called");
}

base::Result<Value> Interpreter::CallMacro(const MacroFunction& macro, CallArgs args,
                                           uint32_t offset) {
  const Stmt& def = *macro.definition;
  const std::string display = macro.name();
  if (call_depth_ + 1 > limits_.max_call_depth) {
    return LimitError(offset, "macro calls nest deeper than " +
                                  std::to_string(limits_.max_call_depth) + " (max_call_depth)");
  }
  struct CallDepth {
    int* depth;
    explicit CallDepth(int* d) : depth(d) { ++*depth; }
    ~CallDepth() { --*depth; }
  } call_depth(&call_depth_);

  auto scope = std::make_shared<Scope>();
  scope->parent = macro.closure;
  const std::vector<MacroParam>& params = def.params;
  std::vector<bool> set(params.size(), false);
  const size_t np = std::min(params.size(), args.positional.size());
  for (size_t i = 0; i < np; ++i) {
    scope->vars.Set(params[i].name, args.positional[i]);
    set[i] = true;
  }
  if (args.positional.size() > params.size()) {
    if (!def.uses_varargs) {
      return Error(offset, display + " takes not more than " + std::to_string(params.size()) +
                               " argument(s)");
    }
  }
  ValueList varargs(args.positional.begin() + static_cast<ptrdiff_t>(np), args.positional.end());
  ValueDict kwargs;
  for (auto& keyword : args.keyword) {
    const std::string& key = keyword.first;
    Value& value = keyword.second;
    auto it = std::find_if(params.begin(), params.end(),
                           [&key](const MacroParam& p) { return p.name == key; });
    if (it != params.end()) {
      size_t i = static_cast<size_t>(it - params.begin());
      if (set[i]) return Error(offset, display + " got multiple values for argument '" + key + "'");
      scope->vars.Set(key, std::move(value));
      set[i] = true;
    } else if (key == "caller" && def.kind == Stmt::Kind::kMacro) {
      scope->vars.Set("caller", std::move(value));
    } else if (def.uses_kwargs) {
      kwargs.Set(key, std::move(value));
    } else {
      return Error(offset, display + " takes no keyword argument '" + key + "'");
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (set[i]) continue;
    if (params[i].default_value) {
      SOVAI_ASSIGN_OR_RETURN(Value v, Eval(*params[i].default_value, scope));
      scope->vars.Set(params[i].name, std::move(v));
    } else {
      scope->vars.Set(params[i].name,
                      Value::Undefined("parameter '" + params[i].name + "' was not provided"));
    }
  }
  if (def.uses_varargs) scope->vars.Set("varargs", Value::Tuple(std::move(varargs)));
  if (def.uses_kwargs) scope->vars.Set("kwargs", Value::Dict(std::move(kwargs)));
  std::string buffer;
  SOVAI_ASSIGN_OR_RETURN(Flow flow, ExecBody(def.body, scope, &buffer));
  (void)flow;  // the parser keeps break/continue inside loops of the macro
  return Value::String(std::move(buffer));
}

// --- Operators ---

base::Result<bool> Interpreter::Eq(const Value& a, const Value& b, uint32_t offset) {
  SOVAI_RETURN_IF_ERROR(Charge(std::min(a.weight(), b.weight()), offset));
  return Equals(a, b);
}

base::Result<bool> Interpreter::Contains(const Value& container, const Value& needle,
                                         uint32_t offset) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!needle.is_string()) {
        return Error(offset, "'in <string>' requires string as left operand, not " +
                                 std::string(TypeName(needle)));
      }
      SOVAI_RETURN_IF_ERROR(Charge(container.weight(), offset));
      return container.string_value().find(needle.string_value()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& item : container.list_items()) {
        SOVAI_ASSIGN_OR_RETURN(bool eq, Eq(item, needle, offset));
        if (eq) return true;
      }
      return false;
    case Value::Kind::kDict:
      if (needle.is_list() || needle.is_dict()) {
        return Error(offset, "unhashable type: '" + std::string(TypeName(needle)) + "'");
      }
      return needle.is_string() && container.dict().Find(needle.string_value()) != nullptr;
    default:
      return Error(offset,
                   "argument of type '" + std::string(TypeName(container)) + "' is not iterable");
  }
}

base::Result<bool> Interpreter::Compare(CompareOp op, const Value& a, const Value& b,
                                        uint32_t offset) {
  switch (op) {
    case CompareOp::kEq:
      return Eq(a, b, offset);
    case CompareOp::kNe: {
      SOVAI_ASSIGN_OR_RETURN(bool eq, Eq(a, b, offset));
      return !eq;
    }
    case CompareOp::kIn:
      return Contains(b, a, offset);
    case CompareOp::kNotIn: {
      SOVAI_ASSIGN_OR_RETURN(bool in, Contains(b, a, offset));
      return !in;
    }
    default:
      break;
  }
  if (a.is_undefined()) return UndefinedError(a, offset);
  if (b.is_undefined()) return UndefinedError(b, offset);
  const char* symbol = op == CompareOp::kLt   ? "<"
                       : op == CompareOp::kLe ? "<="
                       : op == CompareOp::kGt ? ">"
                                              : ">=";
  auto holds = [op](int c) {
    switch (op) {
      case CompareOp::kLt:
        return c < 0;
      case CompareOp::kLe:
        return c <= 0;
      case CompareOp::kGt:
        return c > 0;
      default:
        return c >= 0;
    }
  };
  if (a.is_number() && b.is_number() && (a.is_float() || b.is_float())) {
    const double x = a.AsDouble(), y = b.AsDouble();
    if (std::isnan(x) || std::isnan(y)) return false;
    return holds(x < y ? -1 : (x > y ? 1 : 0));
  }
  SOVAI_RETURN_IF_ERROR(Charge(std::min(a.weight(), b.weight()), offset));
  std::optional<int> c = jinja::Compare(a, b);
  if (!c) {
    return Error(offset, std::string("'") + symbol + "' not supported between instances of '" +
                             std::string(TypeName(a)) + "' and '" + std::string(TypeName(b)) + "'");
  }
  return holds(*c);
}

namespace {

std::string OperandError(std::string_view op, const Value& a, const Value& b) {
  return "unsupported operand type(s) for " + std::string(op) + ": '" + std::string(TypeName(a)) +
         "' and '" + std::string(TypeName(b)) + "'";
}

std::string_view OpSymbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return "+";
    case BinaryOp::kSub:
      return "-";
    case BinaryOp::kMul:
      return "*";
    case BinaryOp::kDiv:
      return "/";
    case BinaryOp::kFloorDiv:
      return "//";
    case BinaryOp::kMod:
      return "%";
    case BinaryOp::kPow:
      return "**";
    case BinaryOp::kConcat:
      return "~";
    case BinaryOp::kAnd:
      return "and";
    case BinaryOp::kOr:
      return "or";
  }
  return "?";
}

// Python's int arithmetic (bools count as ints); nullopt for an operator ints do not define.
base::Result<std::optional<Value>> IntArithmetic(const Interpreter& in, BinaryOp op, int64_t x,
                                                 int64_t y, uint32_t offset) {
  int64_t r = 0;
  switch (op) {
    case BinaryOp::kAdd:
      if (__builtin_add_overflow(x, y, &r)) return in.Error(offset, "integer overflow");
      return Value::Int(r);
    case BinaryOp::kSub:
      if (__builtin_sub_overflow(x, y, &r)) return in.Error(offset, "integer overflow");
      return Value::Int(r);
    case BinaryOp::kMul:
      if (__builtin_mul_overflow(x, y, &r)) return in.Error(offset, "integer overflow");
      return Value::Int(r);
    case BinaryOp::kDiv:
      if (y == 0) return in.Error(offset, "division by zero");
      return Value::Float(static_cast<double>(x) / static_cast<double>(y));
    case BinaryOp::kFloorDiv: {
      if (y == 0) return in.Error(offset, "integer division or modulo by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) {
        return in.Error(offset, "integer overflow");
      }
      int64_t q = x / y;
      if (x % y != 0 && ((x < 0) != (y < 0))) --q;
      return Value::Int(q);
    }
    case BinaryOp::kMod: {
      if (y == 0) return in.Error(offset, "integer division or modulo by zero");
      if (y == -1) return Value::Int(0);
      int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value::Int(m);
    }
    case BinaryOp::kPow: {
      if (y < 0) {
        if (x == 0) return in.Error(offset, "0.0 cannot be raised to a negative power");
        return Value::Float(std::pow(static_cast<double>(x), static_cast<double>(y)));
      }
      int64_t result = 1, base = x, e = y;
      while (e > 0) {
        if (e & 1) {
          if (__builtin_mul_overflow(result, base, &result)) {
            return in.Error(offset, "integer overflow");
          }
        }
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) {
          return in.Error(offset, "integer overflow");
        }
      }
      return Value::Int(result);
    }
    default:
      return std::optional<Value>();
  }
  return std::optional<Value>();
}

// Python's float arithmetic (either operand a float); nullopt for an operator it does not define.
base::Result<std::optional<Value>> FloatArithmetic(const Interpreter& in, BinaryOp op, double x,
                                                   double y, uint32_t offset) {
  switch (op) {
    case BinaryOp::kAdd:
      return Value::Float(x + y);
    case BinaryOp::kSub:
      return Value::Float(x - y);
    case BinaryOp::kMul:
      return Value::Float(x * y);
    case BinaryOp::kDiv:
      if (y == 0) return in.Error(offset, "float division by zero");
      return Value::Float(x / y);
    case BinaryOp::kFloorDiv:
      if (y == 0) return in.Error(offset, "float floor division by zero");
      return Value::Float(std::floor(x / y));
    case BinaryOp::kMod: {
      if (y == 0) return in.Error(offset, "float modulo by zero");
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value::Float(m);
    }
    case BinaryOp::kPow: {
      if (x == 0 && y < 0) return in.Error(offset, "0.0 cannot be raised to a negative power");
      if (x < 0 && std::floor(y) != y) {
        return in.Error(offset, "a negative number raised to a fractional power is complex");
      }
      double r = std::pow(x, y);
      if (std::isinf(r) && std::isfinite(x) && std::isfinite(y)) {
        return in.Error(offset, "numerical result out of range");
      }
      return Value::Float(r);
    }
    default:
      return std::optional<Value>();
  }
  return std::optional<Value>();
}

}  // namespace

base::Result<Value> Interpreter::Binary(BinaryOp op, const Value& a, const Value& b,
                                        uint32_t offset) {
  if (op == BinaryOp::kConcat) {
    SOVAI_ASSIGN_OR_RETURN(std::string left, Str(a, offset));
    SOVAI_ASSIGN_OR_RETURN(std::string right, Str(b, offset));
    return MakeString(left + right, offset);
  }
  if (a.is_undefined()) return UndefinedError(a, offset);
  if (b.is_undefined()) return UndefinedError(b, offset);
  const std::string_view symbol = OpSymbol(op);

  if (a.is_number() && b.is_number()) {
    SOVAI_ASSIGN_OR_RETURN(std::optional<Value> number,
                           IsIntLike(a) && IsIntLike(b)
                               ? IntArithmetic(*this, op, AsInt(a), AsInt(b), offset)
                               : FloatArithmetic(*this, op, a.AsDouble(), b.AsDouble(), offset));
    if (number) return std::move(*number);
  }

  if (op == BinaryOp::kAdd) {
    if (a.is_string() && b.is_string()) {
      if (a.string_value().size() + b.string_value().size() > limits_.max_output_bytes) {
        return LimitError(offset, "string is longer than max_output_bytes (" +
                                      std::to_string(limits_.max_output_bytes) + ")");
      }
      return Value::String(a.string_value() + b.string_value());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      ValueList items = a.list_items();
      items.insert(items.end(), b.list_items().begin(), b.list_items().end());
      SOVAI_RETURN_IF_ERROR(Charge(items.size(), offset));
      return MakeList(std::move(items), offset, a.is_tuple());
    }
  }
  if (op == BinaryOp::kMul) {
    // Sequence repetition: "ab" * 3, [x] * 3 (either order).
    const Value& seq = IsIntLike(a) ? b : a;
    const Value& count = IsIntLike(a) ? a : b;
    if ((seq.is_string() || seq.is_list()) && IsIntLike(count)) {
      const int64_t n = std::max<int64_t>(0, AsInt(count));
      const uint64_t unit = seq.is_string() ? seq.string_value().size() : seq.weight();
      if (n > 0 && unit > limits_.max_output_bytes / static_cast<uint64_t>(n)) {
        return LimitError(offset, "repeating a sequence " + std::to_string(n) +
                                      " times exceeds max_output_bytes (" +
                                      std::to_string(limits_.max_output_bytes) + ")");
      }
      if (seq.is_string()) {
        std::string out;
        out.reserve(seq.string_value().size() * static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) out += seq.string_value();
        return Value::String(std::move(out));
      }
      ValueList items;
      for (int64_t i = 0; i < n; ++i) {
        items.insert(items.end(), seq.list_items().begin(), seq.list_items().end());
      }
      SOVAI_RETURN_IF_ERROR(Charge(items.size(), offset));
      return MakeList(std::move(items), offset, seq.is_tuple());
    }
  }
  if (op == BinaryOp::kMod && a.is_string()) {
    return UnsupportedError(offset, "printf-style string formatting ('...' % value)");
  }
  return Error(offset, OperandError(symbol, a, b));
}

}  // namespace sovai::model::jinja
