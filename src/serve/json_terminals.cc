#include "serve/internal/json_grammar.h"

namespace sovai::serve::json_internal {

StepResult StepString(const Element& e, uint32_t count, uint32_t aux, uint8_t b) {
  const StepResult char_done = Stay(CountUp(count, e), kStrBody);
  const bool cont = InRange(b, 0x80, 0xBF);
  switch (aux) {
    case kStrStart:
      return b == '"' ? Stay(0, kStrBody) : kRejected;
    case kStrBody:
      if (b == '"') return count >= e.min ? Done() : kRejected;
      if (count >= e.max) return kRejected;
      if (b == '\\') return Stay(count, kStrEscape);
      if (InRange(b, 0x20, 0x7F)) return char_done;
      if (InRange(b, 0xC2, 0xDF)) return Stay(count, kStrCont1);
      if (b == 0xE0) return Stay(count, kStrE0);
      if (b == 0xED) return Stay(count, kStrED);
      if (InRange(b, 0xE1, 0xEF)) return Stay(count, kStrCont2);
      if (b == 0xF0) return Stay(count, kStrF0);
      if (b == 0xF4) return Stay(count, kStrF4);
      if (InRange(b, 0xF1, 0xF3)) return Stay(count, kStrCont3);
      return kRejected;  // control characters, stray continuations, C0, C1, F5-FF
    case kStrEscape:
      switch (b) {
        case '"':
        case '\\':
        case '/':
        case 'b':
        case 'f':
        case 'n':
        case 'r':
        case 't':
          return char_done;
        case 'u':
          return Stay(count, kStrU1);
        default:
          return kRejected;
      }
    case kStrU1:
      if (b == 'd' || b == 'D') return Stay(count, kStrU2AfterD);
      return IsHex(b) ? Stay(count, kStrHex3) : kRejected;
    case kStrU2AfterD:
      if (InRange(b, '0', '7')) return Stay(count, kStrHex2);
      if (InRange(b, '8', '9') || InRange(b, 'a', 'b') || InRange(b, 'A', 'B')) {
        return Stay(count, kStrHighHex2);
      }
      return kRejected;  // DC00-DFFF: a low surrogate without a high one
    case kStrHex3:
      return IsHex(b) ? Stay(count, kStrHex2) : kRejected;
    case kStrHex2:
      return IsHex(b) ? Stay(count, kStrHex1) : kRejected;
    case kStrHex1:
    case kStrLowHex1:
      return IsHex(b) ? char_done : kRejected;
    case kStrHighHex2:
      return IsHex(b) ? Stay(count, kStrHighHex1) : kRejected;
    case kStrHighHex1:
      return IsHex(b) ? Stay(count, kStrLowBackslash) : kRejected;
    case kStrLowBackslash:
      return b == '\\' ? Stay(count, kStrLowU) : kRejected;
    case kStrLowU:
      return b == 'u' ? Stay(count, kStrLowD) : kRejected;
    case kStrLowD:
      return b == 'd' || b == 'D' ? Stay(count, kStrLowC) : kRejected;
    case kStrLowC:
      return InRange(b, 'c', 'f') || InRange(b, 'C', 'F') ? Stay(count, kStrLowHex2) : kRejected;
    case kStrLowHex2:
      return IsHex(b) ? Stay(count, kStrLowHex1) : kRejected;
    case kStrCont1:
      return cont ? char_done : kRejected;
    case kStrCont2:
      return cont ? Stay(count, kStrCont1) : kRejected;
    case kStrCont3:
      return cont ? Stay(count, kStrCont2) : kRejected;
    case kStrE0:
      return InRange(b, 0xA0, 0xBF) ? Stay(count, kStrCont1) : kRejected;
    case kStrED:
      return InRange(b, 0x80, 0x9F) ? Stay(count, kStrCont1) : kRejected;
    case kStrF0:
      return InRange(b, 0x90, 0xBF) ? Stay(count, kStrCont2) : kRejected;
    case kStrF4:
      return InRange(b, 0x80, 0x8F) ? Stay(count, kStrCont2) : kRejected;
    default:
      SOVAI_CHECK(false) << "bad string state " << aux;
      return kRejected;
  }
}

// kNumber: RFC 8259's number. count: digits of the current part.
enum NumberState : uint32_t {
  kNumStart = 0,
  kNumMinus,
  kNumZero,  // a leading 0: no more integer digits
  kNumInt,
  kNumDot,
  kNumFrac,
  kNumExp,  // after e/E
  kNumExpSign,
  kNumExpDigits,
};

StepResult StepNumber(const Element& e, uint32_t count, uint32_t aux, uint8_t b) {
  const bool integer_only = (e.flags & JsonGrammar::kIntegerOnly) != 0;
  const bool exponent = !integer_only && (b == 'e' || b == 'E');
  switch (aux) {
    case kNumStart:
      if (b == '-' && (e.flags & JsonGrammar::kNonNegative) == 0) return Stay(0, kNumMinus);
      [[fallthrough]];
    case kNumMinus:
      if (b == '0') return Stay(0, kNumZero);
      return InRange(b, '1', '9') ? Stay(1, kNumInt) : kRejected;
    case kNumZero:
    case kNumInt:
      if (aux == kNumInt && IsDigit(b) && count < kMaxIntegerDigits)
        return Stay(count + 1, kNumInt);
      if (!integer_only && b == '.') return Stay(0, kNumDot);
      return exponent ? Stay(0, kNumExp) : kRejected;
    case kNumDot:
      return IsDigit(b) ? Stay(1, kNumFrac) : kRejected;
    case kNumFrac:
      if (IsDigit(b) && count < kMaxFractionDigits) return Stay(count + 1, kNumFrac);
      return exponent ? Stay(0, kNumExp) : kRejected;
    case kNumExp:
      if (b == '+' || b == '-') return Stay(0, kNumExpSign);
      [[fallthrough]];
    case kNumExpSign:
      return IsDigit(b) ? Stay(1, kNumExpDigits) : kRejected;
    case kNumExpDigits:
      return IsDigit(b) && count < kMaxExponentDigits ? Stay(count + 1, kNumExpDigits) : kRejected;
    default:
      SOVAI_CHECK(false) << "bad number state " << aux;
      return kRejected;
  }
}

bool NumberFinal(uint32_t aux) {
  return aux == kNumZero || aux == kNumInt || aux == kNumFrac || aux == kNumExpDigits;
}

// Whether some byte continues the number: a state the parse keeps only if it can.
bool NumberCanContinue(const Element& e, uint32_t count, uint32_t aux) {
  const bool integer_only = (e.flags & JsonGrammar::kIntegerOnly) != 0;
  switch (aux) {
    case kNumZero:
      return !integer_only;
    case kNumInt:
      return count < kMaxIntegerDigits || !integer_only;
    case kNumExpDigits:
      return count < kMaxExponentDigits;
    default:
      return true;
  }
}

StepResult StepLiteral(const JsonGrammar& g, const Element& e, uint32_t aux, uint8_t b) {
  const JsonGrammar::LiteralNode& node = g.literal_nodes[LiteralNodeOf(e, aux)];
  const auto* begin = g.literal_edges.data() + node.first_edge;
  const auto* end = begin + node.num_edges;
  const auto* it = std::lower_bound(
      begin, end, b, [](const JsonGrammar::LiteralEdge& edge, uint8_t v) { return edge.byte < v; });
  if (it == end || it->byte != b) return kRejected;
  if (g.literal_nodes[it->to].num_edges == 0) return Done();
  return Stay(0, it->to);
}

}  // namespace sovai::serve::json_internal
