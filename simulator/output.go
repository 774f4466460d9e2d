package simulator

// What a reply says, whatever its API: reasoning first, then an answer (a
// tool call, a structured-output document, a known answer or filler text),
// cut into tokens that are produced on the engine's schedule. Every API
// writes the same plan in its own events, so the four APIs share timing,
// faults and ground truth.

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"unicode/utf8"
)

// apiKind is one of the generation APIs.
type apiKind uint8

const (
	apiChat apiKind = iota
	apiCompletions
	apiResponses
	apiMessages
	numAPIs
)

// apiNames name the APIs in stats.
var apiNames = [numAPIs]string{"chat", "completions", "responses", "messages"}

// request is what the simulator reads of a generation request, whatever
// its API.
type request struct {
	api       apiKind
	texts     []string // the prompt's texts, in order, for the tokenizer
	question  string   // the last user message, where known-answer questions are looked for
	limit     int      // the output limit in tokens, 0: none
	stream    bool
	usage     bool // chat and completions: stream_options.include_usage
	ignoreEOS bool
	tools     []tool
	choice    toolChoice
	format    *outputFormat // structured output; nil: free text

	// The Responses API echoes these in its response object.
	instructions    *string
	maxOutputTokens *int
}

// tool is a function the request offers, with the arguments the simulator
// calls it with (generated from its parameters at parse time, so that a
// schema the generator cannot satisfy is a 400 before anything is drawn).
type tool struct {
	name   string
	params *schema // nil: no parameters
	args   string
}

// toolChoice says whether and which tool a reply calls: mode "none",
// "auto" (the first tool, for a deterministic reply), "required" (the
// first tool) or "named" (the tool called name).
type toolChoice struct {
	mode, name string
}

// outputFormat is a structured-output format: a document for schema (nil
// for json_object, which any object satisfies), generated at parse time.
type outputFormat struct {
	schema *schema
	doc    string
}

// jsonObjectDoc is the document of a json_object format.
const jsonObjectDoc = `{"answer": "sim"}`

// call returns the tool a reply calls, or nil.
func (r *request) call() *tool {
	if len(r.tools) == 0 || r.choice.mode == "none" {
		return nil
	}
	if r.choice.mode == "named" {
		for i := range r.tools {
			if r.tools[i].name == r.choice.name {
				return &r.tools[i]
			}
		}
	}
	return &r.tools[0]
}

// checkChoice checks a tool choice against the tools; param names it.
func (r *request) checkChoice(param string) error {
	switch r.choice.mode {
	case "required":
		if len(r.tools) == 0 {
			return badRequest(param, "%s is %q but the request has no tools", param, "required")
		}
	case "named":
		if !slices.ContainsFunc(r.tools, func(t tool) bool { return t.name == r.choice.name }) {
			return badRequest(param, "%s names the tool %q, which is not among the request's tools", param, r.choice.name)
		}
	}
	return nil
}

// newTool reads a tool's parameters schema (raw may be empty: no
// parameters) and generates its arguments; param names the schema in errors.
func newTool(name string, raw []byte, param string) (tool, error) {
	t := tool{name: name, args: "{}"}
	if name == "" {
		return t, badRequest(param, "%s: a tool needs a name", param)
	}
	if len(raw) == 0 || string(raw) == "null" {
		return t, nil
	}
	s, doc, err := documentSchema(raw, param)
	if err != nil {
		return t, err
	}
	if s.properties == nil && s.typ == "object" && s.enum == nil && s.constant == nil {
		return t, nil // an object without properties: no arguments
	}
	t.params, t.args = s, doc
	return t, nil
}

// newFormat reads a json_schema format's schema (nil raw: json_object).
func newFormat(raw []byte, param string) (*outputFormat, error) {
	if raw == nil {
		return &outputFormat{doc: jsonObjectDoc}, nil
	}
	s, doc, err := documentSchema(raw, param)
	if err != nil {
		return nil, err
	}
	return &outputFormat{schema: s, doc: doc}, nil
}

// documentSchema reads the schema of a whole document (arguments or a
// structured output) and generates the document. Its root must be an
// object, as OpenAI and Anthropic require: then no proper prefix of the
// document is valid JSON, which truncation relies on.
func documentSchema(raw []byte, param string) (*schema, string, error) {
	s, err := parseSchema(raw, "$")
	if err == nil && s.typ != "object" {
		err = schemaErr("$", "the root of the schema must be an object (type: object)")
	}
	var doc string
	if err == nil {
		doc, _, err = generate(s, false)
	}
	if err != nil {
		return nil, "", badRequest(param, "%s: %v", param, err)
	}
	return s, doc, nil
}

// segment is what a token of a reply is part of.
type segment uint8

const (
	segReasoning segment = iota
	segText              // answer text: filler, a known answer, a JSON document
	segToolArgs          // a tool call's arguments
)

// finish is why a reply ended; each API names it its own way.
type finish uint8

const (
	finishStop      finish = iota // the model stopped (chat "stop", Messages "end_turn")
	finishLength                  // the token limit ended it
	finishToolCalls               // it ended with a tool call
)

// outputKind is what a reply's answer is.
type outputKind uint8

const (
	kindText outputKind = iota
	kindQuestion
	kindStructured
	kindToolCall
)

// contentFault is a fault injected into what a reply says.
type contentFault uint8

const (
	noContentFault contentFault = iota
	faultWrongToolName
	faultMissingArgument
	faultJSONTruncated
	faultJSONMissingField
	faultWrongAnswer
)

// output is the plan of one reply: n tokens, the first reasoning of them
// reasoning, then the answer's pieces (each one token), then filler text.
type output struct {
	n         int
	reasoning int
	finish    finish
	kind      outputKind
	pieces    []string
	call      string // the name a tool call calls (kindToolCall)
	// need is how many pieces the answer takes to be complete: fewer sent
	// (the limit cut it) make it wrong or invalid.
	need  int
	fault contentFault
}

// answerTokens is the number of answer tokens (after the reasoning).
func (o *output) answerTokens() int { return o.n - o.reasoning }

// cut reports whether the token limit ended the answer before it was whole.
func (o *output) cut() bool { return o.kind != kindText && o.answerTokens() < o.need }

// contentDraws are a reply's content-fault draws: four from their own
// stream per request whatever the rates, so that a seed gives the same
// decisions for the same rates, and switching content faults on changes
// neither the output lengths nor the transport faults.
type contentDraws struct {
	wrongTool, invalidJSON, wrongAnswer bool
	by                                  int64 // a wrong answer's error
}

func (s *Simulator) drawContent() contentDraws {
	f := s.faults.Load()
	var u [4]float64
	s.contentRand.float64s(u[:])
	return contentDraws{
		wrongTool:   u[0] < f.WrongToolRate,
		invalidJSON: u[1] < f.InvalidJSONRate,
		wrongAnswer: u[2] < f.WrongAnswerRate,
		by:          wrongBy(u[3]),
	}
}

// prepare tokenizes a request's prompt and plans its reply.
func (s *Simulator) prepare(req *request) (prompt, *output, error) {
	p := s.tok.tokenize(req.texts, s.blockTokens)
	room := s.cfg.MaxModelLen - p.tokens
	if room < 1 || req.limit > room {
		asked := max(req.limit, 1)
		if req.api == apiMessages {
			return p, nil, &requestError{status: http.StatusBadRequest, msg: fmt.Sprintf(
				"prompt is too long: %d tokens + %d max_tokens > %d maximum", p.tokens, asked, s.cfg.MaxModelLen)}
		}
		return p, nil, badRequest("messages",
			"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the input, %d in the completion).",
			s.cfg.MaxModelLen, p.tokens+asked, p.tokens, asked)
	}
	return p, s.compose(req, room), nil
}

// compose plans a reply. The answer is, in this order of precedence: a
// tool call (the request has tools and its tool_choice is not "none"), a
// structured-output document, the answer to a known-answer question, or
// filler text of a drawn length. Reasoning comes first and counts within
// the limit. Tool calls and documents end where they end, ignore_eos or
// not; a known answer is followed by filler with ignore_eos.
func (s *Simulator) compose(req *request, room int) *output {
	// The draws come first and always, so that a seed's sequence of
	// lengths and decisions follows the requests, whatever they ask.
	drawn := 0
	if !req.ignoreEOS {
		drawn = s.lengths.sample(s.cfg.OutputTokens)
	}
	reasoning := 0
	if s.cfg.ReasoningTokens != nil {
		reasoning = s.reasoningLengths.sample(*s.cfg.ReasoningTokens)
	}
	if req.api == apiCompletions {
		reasoning = 0 // completions have no field for it
	}
	cd := s.drawContent()

	o := &output{}
	body, fin := 0, finishStop
	if t := req.call(); t != nil {
		o.kind, o.call = kindToolCall, t.name
		args := t.args
		if cd.wrongTool {
			o.fault, o.call = faultWrongToolName, wrongName(req.tools, t.name)
			if s.wrongTools.Add(1)%2 == 0 && t.params != nil {
				if doc, ok, _ := generate(t.params, true); ok {
					o.fault, o.call, args = faultMissingArgument, t.name, doc
				}
			}
		}
		o.pieces = s.tok.pieces(args)
		o.need, body, fin = len(o.pieces), len(o.pieces), finishToolCalls
	} else if f := req.format; f != nil {
		o.kind = kindStructured
		doc := f.doc
		if cd.invalidJSON {
			o.fault, doc = faultJSONTruncated, truncate(f.doc)
			if s.invalidDocs.Add(1)%2 == 0 && f.schema != nil {
				if d, ok, _ := generate(f.schema, true); ok {
					o.fault, doc = faultJSONMissingField, d
				}
			}
		}
		o.pieces = s.tok.pieces(doc)
		o.need, body = len(o.pieces), len(o.pieces)
	} else if answer, ok := knownAnswer(req.question); ok {
		o.kind = kindQuestion
		if cd.wrongAnswer {
			o.fault, answer = faultWrongAnswer, answer+cd.by
		}
		digits := strconv.FormatInt(answer, 10)
		o.need = len(s.tok.pieces(digits))
		if req.ignoreEOS {
			// The filler that follows is set off by a space.
			o.pieces = s.tok.pieces(digits + " ")
			body, fin = s.cfg.OutputTokens.Max, finishLength
		} else {
			o.pieces = s.tok.pieces(digits)
			body = len(o.pieces)
		}
	} else {
		// The sequence "emits EOS" after a drawn number of tokens, unless
		// ignore_eos asks to go on: then, without a limit, it runs to
		// output_tokens.max.
		body, fin = drawn, finishStop
		if req.ignoreEOS {
			body, fin = s.cfg.OutputTokens.Max, finishLength
		}
	}
	o.n = reasoning + body
	if req.limit > 0 && o.n >= req.limit {
		o.n, fin = req.limit, finishLength
	}
	if o.n >= room {
		o.n, fin = room, finishLength
	}
	o.reasoning, o.finish = min(reasoning, o.n), fin
	return o
}

// wrongName returns a tool name that is not among tools.
func wrongName(tools []tool, name string) string {
	w := name + "_v2"
	for slices.ContainsFunc(tools, func(t tool) bool { return t.name == w }) {
		w += "_v2"
	}
	return w
}

// truncate cuts a document halfway (in characters): since its root is an
// object, what is left is not valid JSON.
func truncate(doc string) string {
	n := utf8.RuneCountInString(doc) / 2
	for i := range doc {
		if n == 0 {
			return doc[:i]
		}
		n--
	}
	return doc
}
