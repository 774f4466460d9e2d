package prober

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/sloprober/sloprober/config"
	"github.com/sloprober/sloprober/internal/safetext"
)

// CheckRequest is what a request of a scenario with a quality check asks,
// and how its reply is judged.
type CheckRequest struct {
	// Name is the check's SLO name (json_schema, known_answer, tool_call).
	Name string
	// Question is the instruction or question, sent after the filler.
	Question string
	// Answer judges a known_answer reply.
	Answer *config.KnownAnswer
	cfg    *config.CheckConfig
}

// CheckVerdict is the outcome of a reply's quality check.
type CheckVerdict struct {
	Name   string
	Passed bool
	// Reason says why a reply failed, in one bounded line.
	Reason string
	// Excerpt is the start of the failed reply (or of the failed call's
	// arguments), bounded and printable.
	Excerpt string
}

// MaxExcerptBytes bounds a failed reply's excerpt.
const MaxExcerptBytes = 256

// defaultSchemaPrompt is a json_schema check's instruction by default.
const defaultSchemaPrompt = "Reply with a JSON object that follows the given schema, and nothing else."

// builtinOps are the operators of the built-in arithmetic questions.
var builtinOps = [...]string{"+", "-", "*"}

// BuiltinQuestion returns the built-in known-answer question of a draw:
// "What is a op b?" with operands up to 9,999, which any model (and the
// simulator, which evaluates it without sharing code) can answer with the
// number alone.
func BuiltinQuestion(rng *rand.Rand) (string, float64) {
	a, b := rng.IntN(10_000), rng.IntN(10_000)
	op := builtinOps[rng.IntN(len(builtinOps))]
	var v int
	switch op {
	case "+":
		v = a + b
	case "-":
		v = a - b
	default:
		v = a * b
	}
	return fmt.Sprintf("What is %d %s %d? Reply with the number only.", a, op, b), float64(v)
}

// checkRequest draws the check of an arrival (rng is the arrival's).
func checkRequest(c *config.CheckConfig, rng *rand.Rand) *CheckRequest {
	cr := &CheckRequest{Name: c.Name(), cfg: c}
	switch {
	case c.JSONSchema != nil:
		cr.Question = cmpOr(c.JSONSchema.Prompt, defaultSchemaPrompt)
	case c.ToolCall != nil:
		cr.Question = c.ToolCall.Prompt
	case c.KnownAnswer != nil:
		k := c.KnownAnswer
		if len(k.Answers) > 0 && (!k.UsesBuiltin() || rng.IntN(2) == 0) {
			a := k.Answers[rng.IntN(len(k.Answers))]
			cr.Question, cr.Answer = a.Prompt, &a
			break
		}
		q, v := BuiltinQuestion(rng)
		cr.Question, cr.Answer = q, &config.KnownAnswer{Prompt: q, Number: &v}
	}
	return cr
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// fields returns the request body fields of the check in an API's form:
// the schema of structured output, or the tools and tool choice.
func (cr *CheckRequest) fields(api string) map[string]any {
	b := map[string]any{}
	switch c := cr.cfg; {
	case c.JSONSchema != nil:
		j := c.JSONSchema
		switch api {
		case "responses":
			b["text"] = map[string]any{"format": map[string]any{"type": "json_schema", "name": j.Name, "schema": j.Doc, "strict": j.IsStrict()}}
		case "messages":
			b["output_config"] = map[string]any{"format": map[string]any{"type": "json_schema", "schema": j.Doc}}
		default:
			b["response_format"] = map[string]any{"type": "json_schema",
				"json_schema": map[string]any{"name": j.Name, "schema": j.Doc, "strict": j.IsStrict()}}
		}
	case c.ToolCall != nil:
		t := c.ToolCall
		var tools []any
		for _, tool := range t.Tools {
			switch api {
			case "responses":
				// strict sent as false: the Responses API may default it to
				// true, which refuses a schema with optional properties.
				tools = append(tools, map[string]any{"type": "function", "name": tool.Name, "description": tool.Description, "parameters": tool.Doc, "strict": false})
			case "messages":
				tools = append(tools, map[string]any{"name": tool.Name, "description": tool.Description, "input_schema": tool.Doc})
			default:
				tools = append(tools, map[string]any{"type": "function",
					"function": map[string]any{"name": tool.Name, "description": tool.Description, "parameters": tool.Doc}})
			}
		}
		b["tools"] = tools
		b["tool_choice"] = toolChoice(api, t.Choice, t.ExpectedTool().Name)
	}
	return b
}

// toolChoice is a tool_call check's tool_choice in an API's form.
func toolChoice(api, choice, name string) any {
	switch api {
	case "messages":
		switch choice {
		case "required":
			return map[string]any{"type": "any"}
		case "named":
			return map[string]any{"type": "tool", "name": name}
		}
		return map[string]any{"type": "auto"}
	case "responses":
		if choice == "named" {
			return map[string]any{"type": "function", "name": name}
		}
	default:
		if choice == "named" {
			return map[string]any{"type": "function", "function": map[string]any{"name": name}}
		}
	}
	return choice
}

// Judge checks a finished request's reply: only an ok request that
// carried generated text has a verdict (a failed one is already bad).
func (cr *CheckRequest) Judge(r *Result) *CheckVerdict {
	if cr == nil || r.Outcome != OutcomeOK || len(r.Chunks) == 0 {
		return nil
	}
	v := &CheckVerdict{Name: cr.Name, Passed: true}
	fail := func(excerpt, format string, args ...any) *CheckVerdict {
		v.Passed = false
		v.Reason = boundMessage(fmt.Sprintf(format, args...))
		v.Excerpt = Excerpt(excerpt)
		return v
	}
	if r.FirstAnswer < 0 {
		// Reasoning only (cut at the maximum before the answer): there
		// is nothing to judge, and "not JSON: EOF" or "found no number"
		// would hide why.
		return fail("", "no answer: the reply is reasoning only, without answer text or a tool call")
	}
	switch c := cr.cfg; {
	case c.JSONSchema != nil:
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(r.Reply))
		if err != nil {
			return fail(r.Reply, "the reply is not JSON: %v", err)
		}
		if err := c.JSONSchema.Compiled.Validate(doc); err != nil {
			return fail(r.Reply, "the reply does not follow the schema: %s", schemaError(err))
		}
	case c.ToolCall != nil:
		want := c.ToolCall.ExpectedTool()
		var names []string
		for _, call := range r.ToolCalls {
			if call.Name != want.Name {
				names = append(names, call.Name)
				continue
			}
			args := call.Arguments
			if strings.TrimSpace(args) == "" {
				args = "{}"
			}
			doc, err := jsonschema.UnmarshalJSON(strings.NewReader(args))
			if err != nil {
				return fail(call.Arguments, "the arguments of %s are not JSON: %v", want.Name, err)
			}
			if err := want.Compiled.Validate(doc); err != nil {
				return fail(call.Arguments, "the arguments of %s do not follow its parameters: %s", want.Name, schemaError(err))
			}
			return v
		}
		if len(names) == 0 {
			return fail(r.Reply, "no tool call: the reply is text")
		}
		return fail(r.Reply, "no call to %s; called %s", want.Name, strings.Join(names, ", "))
	case c.KnownAnswer != nil:
		if ok, why := matchAnswer(cr.Answer, r.Reply); !ok {
			return fail(r.Reply, "wrong answer: %s", why)
		}
	}
	return v
}

// schemaError describes a validation error by its failing leaf at the
// first instance location ("at '/items/0': got number, want string": the
// validator visits an object's properties in map order, so the first leaf
// found is not always the same) and the number of the others.
// The whole tree's text (ValidationError.Error) grows with the reply: a
// hostile reply of 4 MiB, an array of 2 million wrong items, is 80 MB of
// text and seconds of CPU, for a reason cut to MaxServerMessageBytes.
func schemaError(err error) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	var first *jsonschema.ValidationError
	leaves := 0
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			if first == nil || slices.Compare(e.InstanceLocation, first.InstanceLocation) < 0 {
				first = e
			}
			leaves++
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	leaf := jsonschema.ValidationError{SchemaURL: first.SchemaURL, InstanceLocation: first.InstanceLocation, ErrorKind: first.ErrorKind}
	msg := leaf.Error()
	if leaves > 1 {
		msg += fmt.Sprintf(" (and %d more errors)", leaves-1)
	}
	return msg
}

// numberPattern finds a reply's first number (thousands separators
// allowed, as "1,234").
var numberPattern = regexp.MustCompile(`[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?`)

// matchAnswer judges a reply against a known answer: the whole reply
// (trimmed) equal to Exact, matching Regex, or its first number within
// Tolerance of Number. why says what was expected when it does not match.
func matchAnswer(a *config.KnownAnswer, reply string) (ok bool, why string) {
	switch {
	case a.Exact != nil:
		return strings.TrimSpace(reply) == *a.Exact, fmt.Sprintf("expected exactly %q", *a.Exact)
	case a.Compiled != nil:
		return a.Compiled.MatchString(reply), fmt.Sprintf("expected a match of %q", a.Regex)
	case a.Number != nil:
		want := fmt.Sprintf("expected %s", strconv.FormatFloat(*a.Number, 'f', -1, 64))
		if a.Tolerance > 0 {
			want += fmt.Sprintf(" ± %g", a.Tolerance)
		}
		s := numberPattern.FindString(reply)
		if s == "" {
			return false, want + ", found no number"
		}
		got, err := strconv.ParseFloat(strings.ReplaceAll(s, ",", ""), 64)
		if err != nil {
			return false, want + ", found " + s
		}
		return math.Abs(got-*a.Number) <= a.Tolerance, want + ", found " + s
	}
	return false, "no expected answer"
}

// Excerpt returns the start of a text for a report or a log line:
// printable, one line, at most MaxExcerptBytes.
func Excerpt(s string) string { return safetext.Truncate(boundMessage(s), MaxExcerptBytes) }
