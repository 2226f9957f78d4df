// The parser (jinja_parser.h): the shape of the syntax tree for Jinja's operator precedence and
// for each statement. The expected trees follow Jinja 3's grammar (parser.py: parse_or ...
// parse_unary, parse_postfix, parse_filter_expr), e.g. `-2 ** 2` is (-2) ** 2 in Jinja.
#include "model/jinja_parser.h"

#include <gtest/gtest.h>

#include <string>

#include "model/jinja_lexer.h"

namespace sovai::model::jinja {
namespace {

std::string Show(const Expr* e);

std::string ShowList(const std::vector<ExprPtr>& items) {
  std::string out;
  for (const ExprPtr& item : items) out += " " + Show(item.get());
  return out;
}

// Prefix notation of an expression tree.
std::string Show(const Expr* e) {
  if (e == nullptr) return "_";
  switch (e->kind) {
    case Expr::Kind::kLiteral:
      return ToPyRepr(e->literal);
    case Expr::Kind::kName:
      return e->name;
    case Expr::Kind::kList:
      return "(list" + ShowList(e->items) + ")";
    case Expr::Kind::kTuple:
      return "(tuple" + ShowList(e->items) + ")";
    case Expr::Kind::kDict: {
      std::string out = "(dict";
      for (size_t i = 0; i < e->items.size(); ++i) {
        out += " " + Show(e->items[i].get()) + ":" + Show(e->values[i].get());
      }
      return out + ")";
    }
    case Expr::Kind::kAttr:
      return "(. " + Show(e->a.get()) + " " + e->name + ")";
    case Expr::Kind::kItem:
      return "([] " + Show(e->a.get()) + " " + Show(e->b.get()) + ")";
    case Expr::Kind::kSlice:
      return "(slice " + Show(e->a.get()) + " " + Show(e->b.get()) + " " + Show(e->c.get()) + " " +
             Show(e->d.get()) + ")";
    case Expr::Kind::kCall:
    case Expr::Kind::kFilter:
    case Expr::Kind::kTest: {
      std::string out = e->kind == Expr::Kind::kCall ? "(call " + Show(e->a.get())
                        : e->kind == Expr::Kind::kFilter
                            ? "(|" + e->name + " " + Show(e->a.get())
                            : std::string("(is") + (e->negated ? "-not " : " ") + e->name + " " +
                                  Show(e->a.get());
      out += ShowList(e->items);
      for (const auto& [k, v] : e->keyword) out += " " + k + "=" + Show(v.get());
      return out + ")";
    }
    case Expr::Kind::kNeg:
      return "(neg " + Show(e->a.get()) + ")";
    case Expr::Kind::kPos:
      return "(pos " + Show(e->a.get()) + ")";
    case Expr::Kind::kNot:
      return "(not " + Show(e->a.get()) + ")";
    case Expr::Kind::kBinary: {
      static const char* kOps[] = {"+", "-", "*", "/", "//", "%", "**", "~", "and", "or"};
      return std::string("(") + kOps[static_cast<int>(e->op)] + " " + Show(e->a.get()) + " " +
             Show(e->b.get()) + ")";
    }
    case Expr::Kind::kCompare: {
      static const char* kOps[] = {"==", "!=", "<", "<=", ">", ">=", "in", "not-in"};
      std::string out = "(cmp " + Show(e->a.get());
      for (size_t i = 0; i < e->compare_ops.size(); ++i) {
        out += std::string(" ") + kOps[static_cast<int>(e->compare_ops[i])] + " " +
               Show(e->items[i].get());
      }
      return out + ")";
    }
    case Expr::Kind::kCond:
      return "(if " + Show(e->a.get()) + " " + Show(e->b.get()) + " " + Show(e->c.get()) + ")";
  }
  return "?";
}

struct Parsed {
  SourceMap map;
  Program program;
};

std::unique_ptr<Parsed> ParseOk(std::string_view source) {
  auto map = std::make_unique<SourceMap>(NormalizeSource(source));
  auto tokens = Lex(*map);
  EXPECT_TRUE(tokens.ok()) << tokens.status();
  if (!tokens.ok()) return nullptr;
  auto program = Parse(*tokens, *map);
  EXPECT_TRUE(program.ok()) << program.status();
  if (!program.ok()) return nullptr;
  return std::make_unique<Parsed>(Parsed{std::move(*map), std::move(*program)});
}

// The tree of `{{ expr }}`.
std::string ExprTree(const std::string& expr) {
  auto parsed = ParseOk("{{ " + expr + " }}");
  if (!parsed || parsed->program.body.size() != 1) return "<parse failed>";
  return Show(parsed->program.body[0]->expr.get());
}

TEST(JinjaParserTest, OperatorPrecedence) {
  EXPECT_EQ(ExprTree("1 + 2 * 3"), "(+ 1 (* 2 3))");
  EXPECT_EQ(ExprTree("(1 + 2) * 3"), "(* (+ 1 2) 3)");
  EXPECT_EQ(ExprTree("10 - 2 - 3"), "(- (- 10 2) 3)");
  EXPECT_EQ(ExprTree("-2 ** 2"), "(** (neg 2) 2)");
  EXPECT_EQ(ExprTree("2 ** 3 ** 2"), "(** (** 2 3) 2)");
  EXPECT_EQ(ExprTree("'a' ~ 1 + 2"), "(+ (~ 'a' 1) 2)");
  EXPECT_EQ(ExprTree("a + b ~ c"), "(+ a (~ b c))");
  EXPECT_EQ(ExprTree("not a in b"), "(not (cmp a in b))");
  EXPECT_EQ(ExprTree("a not in b"), "(cmp a not-in b)");
  EXPECT_EQ(ExprTree("a or b and not c"), "(or a (and b (not c)))");
  EXPECT_EQ(ExprTree("a < b <= c == d"), "(cmp a < b <= c == d)");
  EXPECT_EQ(ExprTree("a if b else c if d"), "(if b a (if d c _))");
  EXPECT_EQ(ExprTree("x | trim | replace(1, count=2)"), "(|replace (|trim x) 1 count=2)");
  EXPECT_EQ(ExprTree("-x | abs"), "(|abs (neg x))");
  EXPECT_EQ(ExprTree("'a' + x | trim"), "(+ 'a' (|trim x))");
  EXPECT_EQ(ExprTree("x is not defined and y"), "(and (is-not defined x) y)");
  EXPECT_EQ(ExprTree("not x is defined"), "(not (is defined x))");
  EXPECT_EQ(ExprTree("x is divisibleby 3"), "(is divisibleby x 3)");
  EXPECT_EQ(ExprTree("x is sameas none"), "(is sameas x None)");
  EXPECT_EQ(ExprTree("x is eq(y.z)"), "(is eq x (. y z))");
  EXPECT_EQ(ExprTree("x is defined or y"), "(or (is defined x) y)");
}

TEST(JinjaParserTest, Primaries) {
  EXPECT_EQ(ExprTree("'a' \"b\" 'c'"), "'abc'");
  EXPECT_EQ(ExprTree("true, True, false, none, None"), "(tuple True True False None None)");
  EXPECT_EQ(ExprTree("[1, [2], ]"), "(list 1 (list 2))");
  EXPECT_EQ(ExprTree("(1,)"), "(tuple 1)");
  EXPECT_EQ(ExprTree("()"), "(tuple)");
  EXPECT_EQ(ExprTree("{'a': 1, 'b': {}}"), "(dict 'a':1 'b':(dict))");
  EXPECT_EQ(ExprTree("a.b[0].c"), "(. ([] (. a b) 0) c)");
  EXPECT_EQ(ExprTree("a.0"), "([] a 0)");
  EXPECT_EQ(ExprTree("a[1:]"), "(slice a 1 _ _)");
  EXPECT_EQ(ExprTree("a[::-1]"), "(slice a _ _ (neg 1))");
  EXPECT_EQ(ExprTree("a[:n - 1]"), "(slice a _ (- n 1) _)");
  EXPECT_EQ(ExprTree("f(1, k=2)(3)"), "(call (call f 1 k=2) 3)");
  EXPECT_EQ(ExprTree("s.strip().split(',')"), "(call (. (call (. s strip)) split) ',')");
}

TEST(JinjaParserTest, Statements) {
  auto parsed = ParseOk(
      "{% if a %}1{% elif b %}2{% else %}3{% endif %}"
      "{% for k, v in d.items() if k != 'x' %}{{ k }}{% else %}none{% endfor %}"
      "{% set ns.total = 1 %}{% set a, b = 1, 2 %}{% set blk | upper %}x{% endset %}"
      "{% macro m(a, b='x') %}{{ varargs }}{% endmacro %}"
      "{% call(item) m(1) %}{{ item }}{% endcall %}"
      "{% filter upper | trim %}y{% endfilter %}"
      "{% for x in y %}{% break %}{% continue %}{% endfor %}"
      "{% generation %}g{% endgeneration %}");
  ASSERT_TRUE(parsed);
  const Body& body = parsed->program.body;
  ASSERT_EQ(body.size(), 10u);
  EXPECT_EQ(body[0]->kind, Stmt::Kind::kIf);
  EXPECT_EQ(body[0]->branches.size(), 2u);
  EXPECT_EQ(body[0]->else_body.size(), 1u);
  EXPECT_EQ(body[1]->kind, Stmt::Kind::kFor);
  EXPECT_EQ(body[1]->target.names, (std::vector<std::string>{"k", "v"}));
  EXPECT_TRUE(body[1]->target.is_tuple);
  EXPECT_EQ(Show(body[1]->expr.get()), "(call (. d items))");
  EXPECT_EQ(Show(body[1]->cond.get()), "(cmp k != 'x')");
  EXPECT_EQ(body[1]->else_body.size(), 1u);
  EXPECT_EQ(body[2]->kind, Stmt::Kind::kSet);
  EXPECT_EQ(body[2]->target.attribute, "total");
  EXPECT_EQ(body[3]->target.names.size(), 2u);
  EXPECT_EQ(Show(body[3]->expr.get()), "(tuple 1 2)");
  EXPECT_EQ(body[4]->kind, Stmt::Kind::kSetBlock);
  EXPECT_EQ(body[4]->filters.size(), 1u);
  EXPECT_EQ(body[5]->kind, Stmt::Kind::kMacro);
  EXPECT_EQ(body[5]->text, "m");
  ASSERT_EQ(body[5]->params.size(), 2u);
  EXPECT_EQ(body[5]->params[1].name, "b");
  EXPECT_TRUE(body[5]->uses_varargs);
  EXPECT_FALSE(body[5]->uses_kwargs);
  EXPECT_EQ(body[6]->kind, Stmt::Kind::kCallBlock);
  EXPECT_EQ(body[6]->params.size(), 1u);
  EXPECT_EQ(body[7]->kind, Stmt::Kind::kFilterBlock);
  EXPECT_EQ(body[7]->filters.size(), 2u);
  EXPECT_EQ(body[8]->body[0]->kind, Stmt::Kind::kBreak);
  EXPECT_EQ(body[8]->body[1]->kind, Stmt::Kind::kContinue);
  EXPECT_EQ(body[9]->kind, Stmt::Kind::kGeneration);
  EXPECT_TRUE(parsed->program.uses_generation);
}

TEST(JinjaParserTest, KnownFiltersAndTests) {
  for (std::string_view f : {"tojson", "trim", "selectattr", "map", "default", "d", "items"}) {
    EXPECT_TRUE(IsKnownFilter(f)) << f;
  }
  EXPECT_FALSE(IsKnownFilter("groupby"));
  for (std::string_view t : {"defined", "none", "string", "mapping", "equalto", "in"}) {
    EXPECT_TRUE(IsKnownTest(t)) << t;
  }
  EXPECT_FALSE(IsKnownTest("nope"));
}

TEST(JinjaParserTest, TokenStreamMustEnd) {
  SourceMap map("");
  EXPECT_FALSE(Parse({}, map).ok());
}

}  // namespace
}  // namespace sovai::model::jinja
