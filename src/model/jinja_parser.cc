#include "model/jinja_parser.h"

#include <algorithm>
#include <array>
#include <initializer_list>

namespace sovai::model::jinja {

namespace {

constexpr std::string_view kFilters[] = {
    "abs",     "attr",     "batch",  "capitalize", "center",     "count",     "d",
    "default", "dictsort", "e",      "escape",     "first",      "float",     "indent",
    "int",     "items",    "join",   "last",       "length",     "list",      "lower",
    "map",     "max",      "min",    "reject",     "rejectattr", "replace",   "reverse",
    "round",   "safe",     "select", "selectattr", "sort",       "string",    "sum",
    "title",   "tojson",   "trim",   "unique",     "upper",      "wordcount",
};
// Jinja filters that chat templates are not expected to need; naming them gives a clearer
// error than "no filter named".
constexpr std::string_view kUnsupportedFilters[] = {
    "filesizeformat", "forceescape", "format",    "groupby", "pprint",   "random",  "slice",
    "striptags",      "truncate",    "urlencode", "urlize",  "wordwrap", "xmlattr",
};
constexpr std::string_view kTests[] = {
    "boolean", "callable", "defined",  "divisibleby", "eq",       "equalto",     "escaped",
    "even",    "false",    "filter",   "float",       "ge",       "greaterthan", "gt",
    "in",      "integer",  "iterable", "le",          "lessthan", "lower",       "lt",
    "mapping", "ne",       "none",     "number",      "odd",      "sameas",      "sequence",
    "string",  "test",     "true",     "undefined",   "upper",
};
// Statements of full Jinja that chat templates cannot use.
constexpr std::string_view kUnsupportedTags[] = {
    "extends", "block",     "include",  "import",  "from",          "with",     "autoescape", "do",
    "trans",   "pluralize", "endblock", "endwith", "endautoescape", "endtrans", "print",
};

template <size_t N>
bool Contains(const std::string_view (&list)[N], std::string_view name) {
  return std::find(std::begin(list), std::end(list), name) != std::end(list);
}

bool IsKeywordConstant(std::string_view name) {
  return name == "true" || name == "false" || name == "none" || name == "True" || name == "False" ||
         name == "None";
}

ExprPtr NewExpr(Expr::Kind kind, uint32_t offset) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->offset = offset;
  return e;
}

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const SourceMap& map, const ParseLimits& limits)
      : toks_(tokens), map_(map), limits_(limits) {}

  base::Result<Program> Run() {
    Program program;
    SOVAI_ASSIGN_OR_RETURN(program.body, ParseBody({}, "", 0));
    program.uses_generation = uses_generation_;
    return program;
  }

 private:
  // --- Token helpers ---

  const Token& Cur() const { return toks_[pos_]; }
  const Token& Peek(size_t ahead = 1) const {
    return toks_[std::min(pos_ + ahead, toks_.size() - 1)];
  }
  void Advance() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool IsOp(std::string_view op) const {
    return Cur().kind == TokenKind::kOperator && Cur().text == op;
  }
  bool IsName(std::string_view name) const {
    return Cur().kind == TokenKind::kName && Cur().text == name;
  }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Advance();
    return true;
  }
  bool SkipName(std::string_view name) {
    if (!IsName(name)) return false;
    Advance();
    return true;
  }

  std::string Where(uint32_t offset) const { return map_.Describe(offset); }

  std::string Describe(const Token& t) const {
    switch (t.kind) {
      case TokenKind::kName:
        return "'" + t.text + "'";
      case TokenKind::kOperator:
        return "'" + t.text + "'";
      case TokenKind::kString:
        return "a string";
      case TokenKind::kInt:
      case TokenKind::kFloat:
        return "a number";
      default:
        return std::string(TokenKindName(t.kind));
    }
  }

  base::Status SyntaxError(uint32_t offset, const std::string& what) const {
    return base::InvalidArgumentError("template syntax error at " + Where(offset) + ": " + what);
  }
  base::Status Unsupported(uint32_t offset, const std::string& what) const {
    return base::UnimplementedError("unsupported Jinja construct at " + Where(offset) + ": " +
                                    what);
  }
  base::Status Unexpected(const std::string& expected) const {
    return SyntaxError(Cur().offset, "expected " + expected + ", found " + Describe(Cur()));
  }

  base::Status ExpectOp(std::string_view op) {
    if (SkipOp(op)) return {};
    return Unexpected("'" + std::string(op) + "'");
  }
  base::Status ExpectBlockEnd(std::string_view after) {
    if (Cur().kind == TokenKind::kBlockEnd) {
      Advance();
      return {};
    }
    return Unexpected("'%}' after '" + std::string(after) + "'");
  }
  base::Result<std::string> ExpectName(std::string_view what) {
    if (Cur().kind != TokenKind::kName) return Unexpected(std::string(what));
    std::string name = Cur().text;
    Advance();
    return name;
  }

  // Computes a node's height from its children and enforces the limit.
  base::Result<ExprPtr> Finish(ExprPtr e) {
    int depth = 0;
    auto take = [&](const ExprPtr& child) {
      if (child) depth = std::max(depth, child->depth);
    };
    take(e->a);
    take(e->b);
    take(e->c);
    take(e->d);
    for (const auto& x : e->items) take(x);
    for (const auto& x : e->values) take(x);
    for (const auto& [k, x] : e->keyword) take(x);
    e->depth = depth + 1;
    if (e->depth > limits_.max_expression_depth) {
      return SyntaxError(e->offset, "expression nests deeper than " +
                                        std::to_string(limits_.max_expression_depth) + " levels");
    }
    return e;
  }

  // --- Statements ---

  // Statements until a `{% name %}` tag with a name in `ends` (left unconsumed), or the end of
  // the template when `ends` is empty.
  base::Result<Body> ParseBody(std::initializer_list<std::string_view> ends, std::string_view owner,
                               uint32_t owner_offset) {
    if (ends.size() != 0) {
      open_blocks_.push_back({std::string(owner), owner_offset, std::string(*(ends.end() - 1))});
    }
    auto body = ParseBodyInner(ends, owner, owner_offset);
    if (ends.size() != 0) open_blocks_.pop_back();
    return body;
  }

  base::Result<Body> ParseBodyInner(std::initializer_list<std::string_view> ends,
                                    std::string_view owner, uint32_t owner_offset) {
    Body body;
    while (true) {
      const Token& t = Cur();
      switch (t.kind) {
        case TokenKind::kText: {
          auto s = std::make_unique<Stmt>();
          s->kind = Stmt::Kind::kText;
          s->offset = t.offset;
          s->text = t.text;
          body.push_back(std::move(s));
          Advance();
          break;
        }
        case TokenKind::kVarBegin: {
          auto s = std::make_unique<Stmt>();
          s->kind = Stmt::Kind::kOutput;
          s->offset = t.offset;
          Advance();
          if (Cur().kind == TokenKind::kVarEnd) return SyntaxError(t.offset, "empty expression");
          SOVAI_ASSIGN_OR_RETURN(s->expr, ParseTuple(false, true, false, {}));
          if (Cur().kind != TokenKind::kVarEnd) return Unexpected("'}}'");
          Advance();
          body.push_back(std::move(s));
          break;
        }
        case TokenKind::kBlockBegin: {
          const Token& name = Peek();
          if (name.kind == TokenKind::kName &&
              std::find(ends.begin(), ends.end(), name.text) != ends.end()) {
            return body;
          }
          SOVAI_ASSIGN_OR_RETURN(StmtPtr s, ParseStatement());
          if (s) body.push_back(std::move(s));
          break;
        }
        case TokenKind::kEnd:
          if (ends.size() != 0) {
            return SyntaxError(owner_offset, "'" + std::string(owner) + "' at " +
                                                 Where(owner_offset) +
                                                 " is never closed with '{% " +
                                                 std::string(*(ends.end() - 1)) + " %}'");
          }
          return body;
        default:
          return Unexpected("template text or a tag");
      }
    }
  }

  // At `{% name`: consumes the tag name (the caller checked it).
  void ConsumeEndTagName() {
    Advance();  // {%
    Advance();  // name
  }

  base::Result<StmtPtr> ParseStatement() {
    Advance();  // {%
    if (Cur().kind != TokenKind::kName) return Unexpected("a statement name after '{%'");
    const std::string name = Cur().text;
    const uint32_t offset = Cur().offset;
    if (++statement_depth_ > limits_.max_statement_depth) {
      return SyntaxError(offset, "statements nest deeper than " +
                                     std::to_string(limits_.max_statement_depth) + " levels");
    }
    auto result = ParseStatementNamed(name, offset);
    --statement_depth_;
    return result;
  }

  base::Result<StmtPtr> ParseStatementNamed(const std::string& name, uint32_t offset) {
    Advance();  // the name
    if (name == "if") return ParseIf(offset);
    if (name == "for") return ParseFor(offset);
    if (name == "set") return ParseSet(offset);
    if (name == "macro") return ParseMacro(offset);
    if (name == "call") return ParseCallBlock(offset);
    if (name == "filter") return ParseFilterBlock(offset);
    if (name == "generation") {
      auto s = std::make_unique<Stmt>();
      s->kind = Stmt::Kind::kGeneration;
      s->offset = offset;
      uses_generation_ = true;
      SOVAI_RETURN_IF_ERROR(ExpectBlockEnd("generation"));
      SOVAI_ASSIGN_OR_RETURN(s->body, ParseBody({"endgeneration"}, "generation", offset));
      ConsumeEndTagName();
      SOVAI_RETURN_IF_ERROR(ExpectBlockEnd("endgeneration"));
      return s;
    }
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) return SyntaxError(offset, "'" + name + "' outside of a for loop");
      auto s = std::make_unique<Stmt>();
      s->kind = name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      s->offset = offset;
      SOVAI_RETURN_IF_ERROR(ExpectBlockEnd(name));
      return s;
    }
    if (Contains(kUnsupportedTags, name)) {
      return Unsupported(offset,
                         "'{% " + name + " %}' statements are not supported in chat templates");
    }
    if (name == "raw" || name == "endraw") {
      return SyntaxError(offset, "malformed '{% " + name + " %}' tag");
    }
    if (name.rfind("end", 0) == 0 || name == "elif" || name == "else") {
      if (open_blocks_.empty()) {
        return SyntaxError(offset, "unexpected '{% " + name + " %}' with no open block to close");
      }
      const OpenBlock& inner = open_blocks_.back();
      return SyntaxError(offset, "unexpected '{% " + name + " %}': the innermost open block is '" +
                                     inner.name + "' at " + Where(inner.offset) +
                                     ", which ends with '{% " + inner.end + " %}'");
    }
    return SyntaxError(offset, "unknown statement '" + name + "'");
  }

  base::Result<StmtPtr> ParseIf(uint32_t offset) {
    auto s = std::make_unique<Stmt>();
    s->kind = Stmt::Kind::kIf;
    s->offset = offset;
    while (true) {
      SOVAI_ASSIGN_OR_RETURN(ExprPtr cond, ParseTuple(false, false, false, {}));
      SOVAI_RETURN_IF_ERROR(ExpectBlockEnd("if"));
      SOVAI_ASSIGN_OR_RETURN(Body body, ParseBody({"elif", "else", "endif"}, "if", offset));
      s->branches.emplace_back(std::move(cond), std::move(body));
      const std::string end = Peek().text;
      ConsumeEndTagName();
      if (end == "elif") continue;
      if (end == "else") {
        SOVAI_RETURN_IF_ERROR(ExpectBlockEnd("else"));
        SOVAI_ASSIGN_OR_RETURN(s->else_body, ParseBody({"endif"}, "if", offset));
        ConsumeEndTagName();
      }
      SOVAI_RETURN_IF_ERROR(ExpectBlockEnd("endif"));
      return s;
    }
  }

  // Names for `for` and `set`: a, or a, b, or (a, b).
  base::Result<Target> ParseTargetNames(std::string_view stop_name) {
    Target target;
    const bool parens = SkipOp("(");
    while (true) {
      if (Cur().kind != TokenKind::kName || IsKeywordConstant(Cur().text)) {
        return Unexpected("a variable name to assign to");
      }
      target.names.push_back(Cur().text);
      Advance();
      if (!SkipOp(",")) break;
      target.is_tuple = true;
      if ((parens && IsOp(")")) || (!stop_name.empty() && IsName(stop_name)) || IsOp("=")) break;
    }
    if (parens) SOVAI_RETURN_IF_ERROR(ExpectOp(")"));
    if (parens && target.names.size() > 1) target.is_tuple = true;
    return target;
  }

  base::Result<StmtPtr> ParseFor(uint32_t offset) {
    auto s = std::make_unique<Stmt>();
    s->kind = Stmt::Kind::kFor;
    s->offset = offset;
    SOVAI_ASSIGN_OR_RETURN(s->target, ParseTargetNames("in"));
    if (!SkipName("in")) return Unexpected("'in'");
    SOVAI_ASSIGN_OR_RETURN(s->expr, ParseTuple(false, false, false, {"recursive", "if"}));
    if (SkipName("if")) {
      SOVAI_ASSIGN_OR_RETURN(s->cond, ParseExpression(true));
    }
    if (IsName("recursive")) {
      return Unsupported(Cur().offset, "recursive for loops are not supported in chat templates");
    }
    SOVAI_RETURN_IF_ERROR(ExpectBlockEnd("for"));
    ++loop_depth_;
    auto body = ParseBody({"else", "endfor"}, "for", offset);
    --loop_depth_;
    if (!body.ok()) return body.status();
    s->body = std::move(*body);
    const std::string end = Peek().text;
    ConsumeEndTagName();
    if (end == "else") {
      SOVAI_RETURN_IF_ERROR(ExpectBlockEnd("else"));
      SOVAI_ASSIGN_OR_RETURN(s->else_body, ParseBody({"endfor"}, "for", offset));
      ConsumeEndTagName();
    }
    SOVAI_RETURN_IF_ERROR(ExpectBlockEnd("endfor"));
    return s;
  }

  base::Result<StmtPtr> ParseSet(uint32_t offset) {
    auto s = std::make_unique<Stmt>();
    s->offset = offset;
    if (Cur().kind == TokenKind::kName && Peek().kind == TokenKind::kOperator &&
        Peek().text == ".") {
      s->target.names.push_back(Cur().text);
      Advance();
      Advance();
      SOVAI_ASSIGN_OR_RETURN(s->target.attribute, ExpectName("an attribute name after '.'"));
    } else {
      SOVAI_ASSIGN_OR_RETURN(s->target, ParseTargetNames(""));
    }
    if (SkipOp("=")) {
      s->kind = Stmt::Kind::kSet;
      SOVAI_ASSIGN_OR_RETURN(s->expr, ParseTuple(false, true, false, {}));
      SOVAI_RETURN_IF_ERROR(ExpectBlockEnd("set"));
      return s;
    }
    if (s->target.is_tuple || !s->target.attribute.empty()) {
      return Unexpected("'=' (a block set assigns one name)");
    }
    s->kind = Stmt::Kind::kSetBlock;
    if (IsOp("|")) {
      SOVAI_RETURN_IF_ERROR(ParseFilterChain(&s->filters));
    }
    SOVAI_RETURN_IF_ERROR(ExpectBlockEnd("set"));
    SOVAI_ASSIGN_OR_RETURN(s->body, ParseBody({"endset"}, "set", offset));
    ConsumeEndTagName();
    SOVAI_RETURN_IF_ERROR(ExpectBlockEnd("endset"));
    return s;
  }

  // (a, b=1, ...) of macros and call blocks.
  base::Status ParseParams(std::vector<MacroParam>* params) {
    SOVAI_RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      if (!params->empty()) SOVAI_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
      const uint32_t at = Cur().offset;
      if (Cur().kind != TokenKind::kName || IsKeywordConstant(Cur().text)) {
        return Unexpected("a parameter name");
      }
      MacroParam p;
      p.name = Cur().text;
      Advance();
      if (SkipOp("=")) {
        SOVAI_ASSIGN_OR_RETURN(p.default_value, ParseExpression(true));
      } else if (!params->empty() && params->back().default_value) {
        return SyntaxError(
            at, "parameter '" + p.name + "' without a default follows one with a default");
      }
      params->push_back(std::move(p));
    }
    Advance();  // )
    return {};
  }

  // Parses a macro or call-block body with its own loop and varargs/kwargs tracking.
  base::Status ParseCallableBody(Stmt* s, std::string_view end, std::string_view owner) {
    const int saved_loop_depth = loop_depth_;
    const bool saved_varargs = saw_varargs_, saved_kwargs = saw_kwargs_;
    loop_depth_ = 0;
    saw_varargs_ = saw_kwargs_ = false;
    auto body = ParseBody({end}, owner, s->offset);
    s->uses_varargs = saw_varargs_;
    s->uses_kwargs = saw_kwargs_;
    loop_depth_ = saved_loop_depth;
    saw_varargs_ = saved_varargs;
    saw_kwargs_ = saved_kwargs;
    if (!body.ok()) return body.status();
    s->body = std::move(*body);
    ConsumeEndTagName();
    return ExpectBlockEnd(end);
  }

  base::Result<StmtPtr> ParseMacro(uint32_t offset) {
    auto s = std::make_unique<Stmt>();
    s->kind = Stmt::Kind::kMacro;
    s->offset = offset;
    if (Cur().kind != TokenKind::kName || IsKeywordConstant(Cur().text)) {
      return Unexpected("a macro name");
    }
    s->text = Cur().text;
    Advance();
    SOVAI_RETURN_IF_ERROR(ParseParams(&s->params));
    SOVAI_RETURN_IF_ERROR(ExpectBlockEnd("macro"));
    SOVAI_RETURN_IF_ERROR(ParseCallableBody(s.get(), "endmacro", "macro"));
    return s;
  }

  base::Result<StmtPtr> ParseCallBlock(uint32_t offset) {
    auto s = std::make_unique<Stmt>();
    s->kind = Stmt::Kind::kCallBlock;
    s->offset = offset;
    if (IsOp("(")) SOVAI_RETURN_IF_ERROR(ParseParams(&s->params));
    SOVAI_ASSIGN_OR_RETURN(s->expr, ParseExpression(true));
    if (s->expr->kind != Expr::Kind::kCall) {
      return SyntaxError(s->expr->offset, "'{% call %}' needs a call, like '{% call m(x) %}'");
    }
    SOVAI_RETURN_IF_ERROR(ExpectBlockEnd("call"));
    SOVAI_RETURN_IF_ERROR(ParseCallableBody(s.get(), "endcall", "call"));
    return s;
  }

  base::Result<StmtPtr> ParseFilterBlock(uint32_t offset) {
    auto s = std::make_unique<Stmt>();
    s->kind = Stmt::Kind::kFilterBlock;
    s->offset = offset;
    SOVAI_RETURN_IF_ERROR(ParseFilterChain(&s->filters, /*start_inline=*/true));
    SOVAI_RETURN_IF_ERROR(ExpectBlockEnd("filter"));
    SOVAI_ASSIGN_OR_RETURN(s->body, ParseBody({"endfilter"}, "filter", offset));
    ConsumeEndTagName();
    SOVAI_RETURN_IF_ERROR(ExpectBlockEnd("endfilter"));
    return s;
  }

  // --- Expressions ---

  // Jinja's parse_tuple: one expression, or several separated by commas (a tuple). Stops before
  // `)`, `}}`, `%}` or a name in `end_names`.
  base::Result<ExprPtr> ParseTuple(bool simplified, bool with_condexpr, bool explicit_parens,
                                   std::initializer_list<std::string_view> end_names) {
    const uint32_t offset = Cur().offset;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    auto at_end = [&] {
      if (Cur().kind == TokenKind::kVarEnd || Cur().kind == TokenKind::kBlockEnd ||
          Cur().kind == TokenKind::kEnd || IsOp(")")) {
        return true;
      }
      return Cur().kind == TokenKind::kName &&
             std::find(end_names.begin(), end_names.end(), Cur().text) != end_names.end();
    };
    while (true) {
      if (!items.empty()) SOVAI_RETURN_IF_ERROR(ExpectOp(","));
      if (at_end()) break;
      if (simplified) {
        SOVAI_ASSIGN_OR_RETURN(ExprPtr e, ParsePrimary());
        items.push_back(std::move(e));
      } else {
        SOVAI_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(with_condexpr));
        items.push_back(std::move(e));
      }
      if (IsOp(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) return Unexpected("an expression");
    }
    auto e = NewExpr(Expr::Kind::kTuple, offset);
    e->items = std::move(items);
    return Finish(std::move(e));
  }

  base::Result<ExprPtr> ParseExpression(bool with_condexpr) {
    if (with_condexpr) return ParseCondExpr();
    return ParseOr();
  }

  base::Result<ExprPtr> ParseCondExpr() {
    SOVAI_ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
    while (IsName("if")) {
      const uint32_t offset = Cur().offset;
      Advance();
      auto e = NewExpr(Expr::Kind::kCond, offset);
      SOVAI_ASSIGN_OR_RETURN(e->a, ParseOr());
      e->b = std::move(expr);
      if (SkipName("else")) {
        SOVAI_ASSIGN_OR_RETURN(e->c, ParseCondExpr());
      }
      SOVAI_ASSIGN_OR_RETURN(expr, Finish(std::move(e)));
    }
    return expr;
  }

  base::Result<ExprPtr> MakeBinary(BinaryOp op, uint32_t offset, ExprPtr left, ExprPtr right) {
    auto e = NewExpr(Expr::Kind::kBinary, offset);
    e->op = op;
    e->a = std::move(left);
    e->b = std::move(right);
    return Finish(std::move(e));
  }

  base::Result<ExprPtr> ParseOr() {
    SOVAI_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      const uint32_t offset = Cur().offset;
      Advance();
      SOVAI_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      SOVAI_ASSIGN_OR_RETURN(left,
                             MakeBinary(BinaryOp::kOr, offset, std::move(left), std::move(right)));
    }
    return left;
  }

  base::Result<ExprPtr> ParseAnd() {
    SOVAI_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      const uint32_t offset = Cur().offset;
      Advance();
      SOVAI_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      SOVAI_ASSIGN_OR_RETURN(left,
                             MakeBinary(BinaryOp::kAnd, offset, std::move(left), std::move(right)));
    }
    return left;
  }

  base::Result<ExprPtr> ParseNot() {
    if (IsName("not")) {
      const uint32_t offset = Cur().offset;
      Advance();
      if (++unary_depth_ > limits_.max_expression_depth) {
        return SyntaxError(offset, "expression nests deeper than " +
                                       std::to_string(limits_.max_expression_depth) + " levels");
      }
      auto e = NewExpr(Expr::Kind::kNot, offset);
      auto operand = ParseNot();
      --unary_depth_;
      if (!operand.ok()) return operand.status();
      e->a = std::move(*operand);
      return Finish(std::move(e));
    }
    return ParseCompare();
  }

  base::Result<ExprPtr> ParseCompare() {
    const uint32_t offset = Cur().offset;
    SOVAI_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    auto e = NewExpr(Expr::Kind::kCompare, offset);
    while (true) {
      CompareOp op;
      if (IsOp("==")) {
        op = CompareOp::kEq;
      } else if (IsOp("!=")) {
        op = CompareOp::kNe;
      } else if (IsOp("<")) {
        op = CompareOp::kLt;
      } else if (IsOp("<=")) {
        op = CompareOp::kLe;
      } else if (IsOp(">")) {
        op = CompareOp::kGt;
      } else if (IsOp(">=")) {
        op = CompareOp::kGe;
      } else if (IsName("in")) {
        op = CompareOp::kIn;
      } else if (IsName("not") && Peek().kind == TokenKind::kName && Peek().text == "in") {
        op = CompareOp::kNotIn;
        Advance();
      } else {
        break;
      }
      Advance();
      SOVAI_ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
      e->compare_ops.push_back(op);
      e->items.push_back(std::move(operand));
    }
    if (e->compare_ops.empty()) return first;
    e->a = std::move(first);
    return Finish(std::move(e));
  }

  base::Result<ExprPtr> ParseMath1() {
    SOVAI_ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      const BinaryOp op = IsOp("+") ? BinaryOp::kAdd : BinaryOp::kSub;
      const uint32_t offset = Cur().offset;
      Advance();
      SOVAI_ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
      SOVAI_ASSIGN_OR_RETURN(left, MakeBinary(op, offset, std::move(left), std::move(right)));
    }
    return left;
  }

  base::Result<ExprPtr> ParseConcat() {
    SOVAI_ASSIGN_OR_RETURN(ExprPtr left, ParseMath2());
    while (IsOp("~")) {
      const uint32_t offset = Cur().offset;
      Advance();
      SOVAI_ASSIGN_OR_RETURN(ExprPtr right, ParseMath2());
      SOVAI_ASSIGN_OR_RETURN(
          left, MakeBinary(BinaryOp::kConcat, offset, std::move(left), std::move(right)));
    }
    return left;
  }

  base::Result<ExprPtr> ParseMath2() {
    SOVAI_ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const BinaryOp op = IsOp("*")    ? BinaryOp::kMul
                          : IsOp("/")  ? BinaryOp::kDiv
                          : IsOp("//") ? BinaryOp::kFloorDiv
                                       : BinaryOp::kMod;
      const uint32_t offset = Cur().offset;
      Advance();
      SOVAI_ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
      SOVAI_ASSIGN_OR_RETURN(left, MakeBinary(op, offset, std::move(left), std::move(right)));
    }
    return left;
  }

  base::Result<ExprPtr> ParsePow() {
    SOVAI_ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
    while (IsOp("**")) {
      const uint32_t offset = Cur().offset;
      Advance();
      SOVAI_ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
      SOVAI_ASSIGN_OR_RETURN(left,
                             MakeBinary(BinaryOp::kPow, offset, std::move(left), std::move(right)));
    }
    return left;
  }

  base::Result<ExprPtr> ParseUnary(bool with_filter) {
    const uint32_t offset = Cur().offset;
    if (++unary_depth_ > limits_.max_expression_depth) {
      return SyntaxError(offset, "expression nests deeper than " +
                                     std::to_string(limits_.max_expression_depth) + " levels");
    }
    auto result = ParseUnaryInner(with_filter);
    --unary_depth_;
    return result;
  }

  base::Result<ExprPtr> ParseUnaryInner(bool with_filter) {
    const uint32_t offset = Cur().offset;
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      auto e = NewExpr(IsOp("-") ? Expr::Kind::kNeg : Expr::Kind::kPos, offset);
      Advance();
      SOVAI_ASSIGN_OR_RETURN(e->a, ParseUnary(false));
      SOVAI_ASSIGN_OR_RETURN(node, Finish(std::move(e)));
    } else {
      SOVAI_ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    SOVAI_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      SOVAI_ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
    }
    return node;
  }

  base::Result<ExprPtr> ParsePrimary() {
    const Token& t = Cur();
    const uint32_t offset = t.offset;
    switch (t.kind) {
      case TokenKind::kName: {
        auto e = NewExpr(Expr::Kind::kLiteral, offset);
        if (t.text == "true" || t.text == "True") {
          e->literal = Value::Bool(true);
        } else if (t.text == "false" || t.text == "False") {
          e->literal = Value::Bool(false);
        } else if (t.text == "none" || t.text == "None") {
          e->literal = Value::None();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = t.text;
          if (t.text == "varargs") saw_varargs_ = true;
          if (t.text == "kwargs") saw_kwargs_ = true;
        }
        Advance();
        return Finish(std::move(e));
      }
      case TokenKind::kString: {
        std::string value;
        while (Cur().kind == TokenKind::kString) {  // adjacent literals concatenate
          value += Cur().text;
          Advance();
        }
        auto e = NewExpr(Expr::Kind::kLiteral, offset);
        e->literal = Value::String(std::move(value));
        return Finish(std::move(e));
      }
      case TokenKind::kInt:
      case TokenKind::kFloat: {
        auto e = NewExpr(Expr::Kind::kLiteral, offset);
        e->literal =
            t.kind == TokenKind::kInt ? Value::Int(t.int_value) : Value::Float(t.float_value);
        Advance();
        return Finish(std::move(e));
      }
      case TokenKind::kOperator:
        if (t.text == "(") {
          Advance();
          SOVAI_ASSIGN_OR_RETURN(ExprPtr e, ParseTuple(false, true, true, {}));
          SOVAI_RETURN_IF_ERROR(ExpectOp(")"));
          return e;
        }
        if (t.text == "[") {
          Advance();
          auto e = NewExpr(Expr::Kind::kList, offset);
          while (!IsOp("]")) {
            if (!e->items.empty()) SOVAI_RETURN_IF_ERROR(ExpectOp(","));
            if (IsOp("]")) break;
            SOVAI_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
            e->items.push_back(std::move(item));
          }
          Advance();
          return Finish(std::move(e));
        }
        if (t.text == "{") {
          Advance();
          auto e = NewExpr(Expr::Kind::kDict, offset);
          while (!IsOp("}")) {
            if (!e->items.empty()) SOVAI_RETURN_IF_ERROR(ExpectOp(","));
            if (IsOp("}")) break;
            SOVAI_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression(true));
            SOVAI_RETURN_IF_ERROR(ExpectOp(":"));
            SOVAI_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
            e->items.push_back(std::move(key));
            e->values.push_back(std::move(value));
          }
          Advance();
          return Finish(std::move(e));
        }
        break;
      default:
        break;
    }
    return Unexpected("an expression");
  }

  base::Result<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      const uint32_t offset = Cur().offset;
      if (IsOp(".")) {
        Advance();
        if (Cur().kind == TokenKind::kName) {
          auto e = NewExpr(Expr::Kind::kAttr, offset);
          e->name = Cur().text;
          e->a = std::move(node);
          Advance();
          SOVAI_ASSIGN_OR_RETURN(node, Finish(std::move(e)));
        } else if (Cur().kind == TokenKind::kInt) {
          auto e = NewExpr(Expr::Kind::kItem, offset);
          auto index = NewExpr(Expr::Kind::kLiteral, Cur().offset);
          index->literal = Value::Int(Cur().int_value);
          Advance();
          e->a = std::move(node);
          e->b = std::move(index);
          SOVAI_ASSIGN_OR_RETURN(node, Finish(std::move(e)));
        } else {
          return Unexpected("an attribute name after '.'");
        }
      } else if (IsOp("[")) {
        Advance();
        SOVAI_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node), offset));
      } else if (IsOp("(")) {
        SOVAI_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  // After `[`: an index or a slice, then `]`.
  base::Result<ExprPtr> ParseSubscript(ExprPtr node, uint32_t offset) {
    ExprPtr parts[3];
    int colons = 0;
    if (!IsOp(":")) {
      SOVAI_ASSIGN_OR_RETURN(parts[0], ParseExpression(true));
    }
    while (IsOp(":") && colons < 2) {
      Advance();
      ++colons;
      if (!IsOp(":") && !IsOp("]")) {
        SOVAI_ASSIGN_OR_RETURN(parts[colons], ParseExpression(true));
      }
    }
    if (IsOp(",")) {
      return Unsupported(Cur().offset, "subscripts with several indexes (a[x, y])");
    }
    SOVAI_RETURN_IF_ERROR(ExpectOp("]"));
    if (colons == 0) {
      auto e = NewExpr(Expr::Kind::kItem, offset);
      e->a = std::move(node);
      e->b = std::move(parts[0]);
      return Finish(std::move(e));
    }
    auto e = NewExpr(Expr::Kind::kSlice, offset);
    e->a = std::move(node);
    e->b = std::move(parts[0]);
    e->c = std::move(parts[1]);
    e->d = std::move(parts[2]);
    return Finish(std::move(e));
  }

  // `(` args `)` into e->items / e->keyword.
  base::Status ParseCallArgs(Expr* e) {
    SOVAI_RETURN_IF_ERROR(ExpectOp("("));
    bool first = true;
    while (!IsOp(")")) {
      if (!first) SOVAI_RETURN_IF_ERROR(ExpectOp(","));
      first = false;
      if (IsOp(")")) break;
      if (IsOp("*") || IsOp("**")) {
        return Unsupported(Cur().offset, "*args and **kwargs in calls");
      }
      if (Cur().kind == TokenKind::kName && Peek().kind == TokenKind::kOperator &&
          Peek().text == "=") {
        std::string key = Cur().text;
        Advance();
        Advance();
        SOVAI_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        e->keyword.emplace_back(std::move(key), std::move(value));
        continue;
      }
      if (!e->keyword.empty()) {
        return SyntaxError(Cur().offset, "positional argument after a keyword argument");
      }
      SOVAI_ASSIGN_OR_RETURN(ExprPtr arg, ParseExpression(true));
      e->items.push_back(std::move(arg));
    }
    Advance();  // )
    return {};
  }

  base::Result<ExprPtr> ParseCall(ExprPtr callee) {
    auto e = NewExpr(Expr::Kind::kCall, Cur().offset);
    e->a = std::move(callee);
    SOVAI_RETURN_IF_ERROR(ParseCallArgs(e.get()));
    return Finish(std::move(e));
  }

  base::Result<std::string> ParseDottedName(std::string_view what) {
    SOVAI_ASSIGN_OR_RETURN(std::string name, ExpectName(what));
    while (IsOp(".")) {
      Advance();
      SOVAI_ASSIGN_OR_RETURN(std::string part, ExpectName(what));
      name += "." + part;
    }
    return name;
  }

  // `| name(args)` once; the operand is set by the caller.
  base::Result<ExprPtr> ParseOneFilter() {
    const uint32_t offset = Cur().offset;
    SOVAI_ASSIGN_OR_RETURN(std::string name, ParseDottedName("a filter name"));
    if (!IsKnownFilter(name)) {
      if (Contains(kUnsupportedFilters, name)) {
        return Unsupported(offset, "the '" + name + "' filter is not supported in chat templates");
      }
      return SyntaxError(offset, "no filter named '" + name + "'");
    }
    auto e = NewExpr(Expr::Kind::kFilter, offset);
    e->name = std::move(name);
    if (IsOp("(")) SOVAI_RETURN_IF_ERROR(ParseCallArgs(e.get()));
    return e;
  }

  // Filters of `{% filter f | g %}` and `{% set x | f %}`: operands left empty.
  base::Status ParseFilterChain(std::vector<ExprPtr>* filters, bool start_inline = false) {
    while (start_inline || SkipOp("|")) {
      start_inline = false;
      SOVAI_ASSIGN_OR_RETURN(ExprPtr f, ParseOneFilter());
      SOVAI_ASSIGN_OR_RETURN(f, Finish(std::move(f)));
      filters->push_back(std::move(f));
    }
    return {};
  }

  base::Result<ExprPtr> ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (SkipOp("|")) {
        SOVAI_ASSIGN_OR_RETURN(ExprPtr f, ParseOneFilter());
        f->a = std::move(node);
        SOVAI_ASSIGN_OR_RETURN(node, Finish(std::move(f)));
      } else if (IsName("is")) {
        SOVAI_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
      } else if (IsOp("(")) {
        SOVAI_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  base::Result<ExprPtr> ParseTest(ExprPtr node) {
    const uint32_t offset = Cur().offset;
    Advance();  // is
    auto e = NewExpr(Expr::Kind::kTest, offset);
    e->negated = SkipName("not");
    const uint32_t name_offset = Cur().offset;
    SOVAI_ASSIGN_OR_RETURN(e->name, ParseDottedName("a test name after 'is'"));
    if (!IsKnownTest(e->name)) return SyntaxError(name_offset, "no test named '" + e->name + "'");
    e->a = std::move(node);
    if (IsOp("(")) {
      SOVAI_RETURN_IF_ERROR(ParseCallArgs(e.get()));
    } else {
      const Token& t = Cur();
      const bool starts_operand = t.kind == TokenKind::kName || t.kind == TokenKind::kString ||
                                  t.kind == TokenKind::kInt || t.kind == TokenKind::kFloat ||
                                  IsOp("[") || IsOp("{");
      static constexpr std::string_view kStops[] = {"else", "or", "and", "if", "in", "not", "is"};
      if (starts_operand && !(t.kind == TokenKind::kName && Contains(kStops, t.text))) {
        SOVAI_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
        SOVAI_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
        e->items.push_back(std::move(arg));
      }
    }
    if (IsName("is")) return SyntaxError(Cur().offset, "tests cannot be chained ('x is a is b')");
    return Finish(std::move(e));
  }

  struct OpenBlock {
    std::string name;
    uint32_t offset;
    std::string end;
  };

  const std::vector<Token>& toks_;
  const SourceMap& map_;
  std::vector<OpenBlock> open_blocks_;
  ParseLimits limits_;
  size_t pos_ = 0;
  int statement_depth_ = 0;
  int unary_depth_ = 0;
  int loop_depth_ = 0;
  bool saw_varargs_ = false;
  bool saw_kwargs_ = false;
  bool uses_generation_ = false;
};

}  // namespace

bool IsKnownFilter(std::string_view name) { return Contains(kFilters, name); }
bool IsKnownTest(std::string_view name) { return Contains(kTests, name); }
std::span<const std::string_view> KnownFilterNames() { return kFilters; }

base::Result<Program> Parse(const std::vector<Token>& tokens, const SourceMap& map,
                            const ParseLimits& limits) {
  if (tokens.empty() || tokens.back().kind != TokenKind::kEnd) {
    return base::InvalidArgumentError("template token stream does not end with an end token");
  }
  return Parser(tokens, map, limits).Run();
}

}  // namespace sovai::model::jinja
