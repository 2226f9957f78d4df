// The parser of the chat-template interpreter (internal to sovai_model_template): tokens from
// jinja_lexer.h into a syntax tree, following Jinja 3's grammar and operator precedence.
//
// Statements: if/elif/else, for (tuple targets, `if` filter, else branch), set (names, tuples,
// `ns.attr`, block form with filters), macro (defaults, varargs/kwargs), call blocks, filter
// blocks, break/continue, and transformers' generation/endgeneration. Expressions: literals
// (str, int, float, true/false/none in both cases, lists, tuples, dicts), names, `.attr`,
// `[index]`, slices, calls with keyword arguments, filters, tests (`is [not] name [args]`),
// unary - + not, ** * / // % + - ~, comparisons (chained), in / not in, and / or, and
// `a if b else c`.
//
// Constructs that real Jinja has but chat templates cannot use (extends, block, include,
// import, from, with, autoescape, do, trans, recursive loops, *args in calls, ...) fail with
// Unimplemented naming the construct and its line:column. Unknown filters and tests fail here
// too, as in Jinja, where they are compile-time errors. Syntax errors are InvalidArgument with
// line:column.
//
// Limits: nesting of statements and the height of expressions are bounded (ParseLimits), so
// parsing and evaluation cannot exhaust the stack.
//
// Thread-safety: pure functions; the tree is immutable once built.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/jinja_lexer.h"
#include "model/jinja_value.h"

namespace sovai::model::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class BinaryOp : uint8_t {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kFloorDiv,
  kMod,
  kPow,
  kConcat,  // ~
  kAnd,
  kOr,
};

enum class CompareOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr {
  enum class Kind : uint8_t {
    kLiteral,  // literal
    kName,     // name
    kList,     // items
    kTuple,    // items
    kDict,     // items (keys), values
    kAttr,     // a.name
    kItem,     // a[b]
    kSlice,    // a[b:c:d], each of b, c, d optional
    kCall,     // a(items..., keyword...)
    kFilter,   // a | name(items..., keyword...); `a` is null inside filter/set blocks
    kTest,     // a is [not] name(items...)
    kNeg,      // -a
    kPos,      // +a
    kNot,      // not a
    kBinary,   // a op b
    kCompare,  // a compare_ops[0] items[0] compare_ops[1] items[1] ...
    kCond,     // b if a else c (c may be null)
  };
  Kind kind = Kind::kLiteral;
  uint32_t offset = 0;
  int depth = 1;  // height of this subtree
  Value literal;
  std::string name;
  BinaryOp op = BinaryOp::kAdd;
  bool negated = false;  // kTest: `is not`
  ExprPtr a, b, c, d;
  std::vector<ExprPtr> items;
  std::vector<ExprPtr> values;
  std::vector<CompareOp> compare_ops;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

// What `set` and `for` assign to: one name, several names (a, b), or one namespace attribute.
struct Target {
  std::vector<std::string> names;
  bool is_tuple = false;
  std::string attribute;  // `ns.attr`: names = {"ns"}, attribute = "attr"
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  enum class Kind : uint8_t {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches (condition, body), else_body
    kFor,          // target in expr [if cond]: body; else else_body
    kSet,          // target = expr
    kSetBlock,     // {% set target | filters %} body {% endset %}
    kMacro,        // macro name(params): body
    kCallBlock,    // {% call(params) expr %} body {% endcall %}
    kFilterBlock,  // {% filter filters %} body {% endfilter %}
    kBreak,
    kContinue,
    kGeneration,  // {% generation %} body {% endgeneration %} (transformers' assistant masks)
  };
  Kind kind = Kind::kText;
  uint32_t offset = 0;
  std::string text;  // kText; kMacro: the macro's name
  ExprPtr expr;      // kOutput, kSet, kFor (iterable), kCallBlock (the call)
  ExprPtr cond;      // kFor: the `if` filter
  Target target;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<ExprPtr> filters;  // kSetBlock, kFilterBlock: kFilter nodes without operand
  std::vector<MacroParam> params;
  bool uses_varargs = false;  // kMacro, kCallBlock: the body reads `varargs` / `kwargs`
  bool uses_kwargs = false;
};

struct ParseLimits {
  // Statements inside statements (if in for in macro ...).
  int max_statement_depth = 64;
  // Height of one expression tree: `a + b + c` is 3, `f(g(x))` is 3.
  int max_expression_depth = 128;
};

struct Program {
  Body body;
  bool uses_generation = false;  // the template has {% generation %} blocks
};

base::Result<Program> Parse(const std::vector<Token>& tokens, const SourceMap& map,
                            const ParseLimits& limits = {});

// The filters and tests the interpreter implements (checked at parse time, as Jinja does).
bool IsKnownFilter(std::string_view name);
// Every filter name IsKnownFilter accepts, for checks that each has an implementation.
std::span<const std::string_view> KnownFilterNames();
bool IsKnownTest(std::string_view name);

}  // namespace sovai::model::jinja
