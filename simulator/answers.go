package simulator

// Known answers: a question that says what its answer is, so that the
// simulator can answer it (right, or wrong on purpose) and a prober can
// check the answer, without the two sharing any code.

import (
	"regexp"
	"strconv"
	"strings"
)

// questionRE matches a known-answer question in the last user message:
//
//	\bWhat is (-?[0-9]{1,10}) ([-+*]) (-?[0-9]{1,10})\?
//
// two decimal integers, each with an optional minus sign, separated by
// single spaces from +, - or *. When the message holds several matches, the
// last one counts, and it is a question only if both operands are at most
// 10^9 in absolute value (so the answer fits in an int64). Text around it
// (filler, earlier messages) is ignored.
//
// The expression is applied only where "What is " occurs, from the end of
// the message back: a prober's prompts are long, and Go's regexp over a
// whole prompt would cost milliseconds that would count as queueing. No
// match can start inside another (after "What is " a match holds only
// digits, spaces, an operator and "?"), so the last such place that
// matches is the last match.
var questionRE = regexp.MustCompile(`^What is (-?[0-9]{1,10}) ([-+*]) (-?[0-9]{1,10})\?`)

// questionStart is where a question begins.
const questionStart = "What is "

// maxOperand bounds a question's operands.
const maxOperand = 1_000_000_000

// knownAnswer returns the answer to the last known-answer question in text,
// and whether there is one.
func knownAnswer(text string) (int64, bool) {
	for end := len(text); ; {
		i := strings.LastIndex(text[:end], questionStart)
		if i < 0 {
			return 0, false
		}
		end = i
		if i > 0 && isWordByte(text[i-1]) { // \b: "What" starts a word
			continue
		}
		if m := questionRE.FindStringSubmatch(text[i:]); m != nil {
			return answer(m[1], m[2], m[3])
		}
	}
}

// answer computes a matched question's answer; operands beyond maxOperand
// make it no question.
func answer(x, op, y string) (int64, bool) {
	a, errA := strconv.ParseInt(x, 10, 64)
	b, errB := strconv.ParseInt(y, 10, 64)
	if errA != nil || errB != nil || abs(a) > maxOperand || abs(b) > maxOperand {
		return 0, false
	}
	switch op {
	case "+":
		return a + b, true
	case "-":
		return a - b, true
	default:
		return a * b, true
	}
}

// isWordByte reports whether c is an ASCII word character, as \b has it.
func isWordByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// wrongBy returns the error of a wrong answer from a draw u in [0, 1):
// 1 to 10, either way, never 0.
func wrongBy(u float64) int64 {
	k := int64(u * 20) // 0..19
	d := k/2 + 1
	if k%2 == 1 {
		d = -d
	}
	return d
}
