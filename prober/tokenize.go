package prober

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sloprober/sloprober/config"
)

// maxInfoReplyBytes bounds a reply of /tokenize, /apply-template, /models
// or /props: the token list of a 1,024-word prompt is about 8 KB.
const maxInfoReplyBytes = 4 << 20

// infoTimeout bounds each calibration request.
const infoTimeout = 10 * time.Second

// calibrationWords are the prompt lengths sent to /tokenize: two lengths far
// apart tell the overhead from the rate.
var calibrationWords = []int{64, 1024}

// calibrationLengths returns the prompt lengths, in words, to send to
// /tokenize for a context of contextTokens (0: unknown): calibrationWords
// where the longer fits, else lengths that do. A server rejects a prompt
// longer than its context (llama-server -c 1024 refused 1,024 words, and
// calibration fell back to one token a word): the longer length is kept
// to half the context at MaxTokensPerWord (1,024 tokens: 128 words, at
// most 512 tokens whatever the tokenizer), and the shorter to an eighth of
// it, so the two stay far apart.
func calibrationLengths(contextTokens int) []int {
	long := calibrationWords[len(calibrationWords)-1]
	if contextTokens <= 0 || float64(long)*MaxTokensPerWord <= float64(contextTokens)/2 {
		return calibrationWords
	}
	long = max(int(float64(contextTokens)/2/MaxTokensPerWord), 8)
	return []int{max(long/8, 1), long}
}

// Calibration says how a target's prompts are calibrated, for the log.
type Calibration struct {
	// Tokenize is the /tokenize form the target answered: "llama.cpp",
	// "vllm", or "" (calibrated from usage only).
	Tokenize string
	// Template is how the chat template's overhead is known:
	// "apply-template" (llama.cpp), "tokenize" (vLLM counts chat messages
	// with their template), or "usage" (learned from usage).
	Template string
	// Context is the context length in tokens and where it came from
	// ("max_model_len", "n_ctx", "max_context"), 0 and "" if unknown.
	Context       int
	ContextSource string
	// Err is why /tokenize gave no counts.
	Err error
	// Rejected counts the /tokenize counts calibration refused.
	Rejected int
}

// tokenizeReply is a /tokenize reply in any engine's form: vLLM and SGLang
// send count (and max_model_len), llama.cpp a token list only.
type tokenizeReply struct {
	Count       *int              `json:"count"`
	MaxModelLen int               `json:"max_model_len"`
	Tokens      []json.RawMessage `json:"tokens"`
}

// parseTokenizeReply returns the token count of a /tokenize reply and the
// context length it states (0 if none). An empty token list without count
// is no count: llama.cpp answers a request in vLLM's form that way.
func parseTokenizeReply(b []byte) (count, maxModelLen int, err error) {
	var r tokenizeReply
	if err := json.Unmarshal(b, &r); err != nil {
		return 0, 0, fmt.Errorf("reply is not a tokenize reply: %s", boundMessage(err.Error()))
	}
	switch {
	case r.Count != nil:
		count = *r.Count
	default:
		count = len(r.Tokens)
	}
	if count <= 0 || count > maxReportedTokens {
		return 0, 0, errors.New("no token count in the reply")
	}
	if r.MaxModelLen < 0 || r.MaxModelLen > maxReportedTokens {
		r.MaxModelLen = 0
	}
	return count, r.MaxModelLen, nil
}

// post sends a JSON body to url and returns the reply body, bounded (call).
func (c *Client) post(ctx context.Context, url string, body any) ([]byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	return c.call(ctx, http.MethodPost, url, b)
}

// call sends a calibration request (body nil for a GET) and returns the
// reply body: at most maxInfoReplyBytes, within infoTimeout, status 200.
func (c *Client) call(ctx context.Context, method, url string, body []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, infoTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	// On a connection of its own, closed after it: a calibration's
	// replies come before the probes', and a server that closes every
	// connection after its response (llama.cpp's) would close a
	// kept-alive one as the next request took it, a close the tracker
	// could not tell from one after no response at all.
	resp, err := c.retry.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxInfoReplyBytes+1))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &statusError{url: config.RedactURL(url), code: resp.StatusCode}
	}
	if len(b) > maxInfoReplyBytes {
		return nil, fmt.Errorf("%s: reply longer than %d bytes", config.RedactURL(url), maxInfoReplyBytes)
	}
	return b, nil
}

// statusError is a calibration request answered with a status other than
// 200.
type statusError struct {
	url  string // redacted
	code int
}

func (e *statusError) Error() string { return fmt.Sprintf("%s: HTTP %d", e.url, e.code) }

// NoTokenize reports whether err, a Calibration's, says only that the
// target has no /tokenize (each form answered 404): a server that does
// not offer it, not an error to log as one.
func NoTokenize(err error) bool {
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok || len(joined.Unwrap()) == 0 {
		return false
	}
	for _, e := range joined.Unwrap() {
		var se *statusError
		if !errors.As(e, &se) || se.code != http.StatusNotFound {
			return false
		}
	}
	return true
}

// Tokenize calibrates cal from the target before any probe: it learns the
// context length (/v1/models' max_model_len, llama.cpp's /props n_ctx, else
// the target's max_context; the smallest known) and asks /tokenize for the
// count of prompts of calibrationWords words. It tries llama.cpp's form
// first ({"content"}, with the chat template from /apply-template), then
// vLLM's ({"model", "messages"|"prompt"}). A target without /tokenize is
// calibrated from usage only.
func (c *Client) Tokenize(ctx context.Context, cal *Calibrator) Calibration {
	return c.tokenize(ctx, cal, c.LearnContext(ctx, cal))
}

// LearnContext sets cal's context length from the target (see Tokenize)
// and returns what it learned.
func (c *Client) LearnContext(ctx context.Context, cal *Calibrator) Calibration {
	var info Calibration
	info.Context, info.ContextSource = c.contextLength(ctx)
	cal.SetContext(info.Context)
	return info
}

// tokenize is the /tokenize part of Tokenize.
func (c *Client) tokenize(ctx context.Context, cal *Calibrator, info Calibration) Calibration {
	var errs []error
	forms := []struct {
		name  string
		count func(context.Context, string) (int, string, error)
	}{{"llama.cpp", c.tokenizeLlama}, {"vllm", c.tokenizeVLLM}}
	lengths := calibrationLengths(info.Context)
	for _, form := range forms {
		var counts []int
		var template string
		var err error
		for i, words := range lengths {
			text := SynthesizePrompt(Seed("tokenize"), uint64(i), words)
			var n int
			n, template, err = form.count(ctx, text)
			if err != nil {
				break
			}
			counts = append(counts, n)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		name := form.name
		accepted := 0
		for i, n := range counts {
			if cal.Observe(lengths[i], n).Accepted {
				accepted++
			} else {
				info.Rejected++
			}
		}
		if accepted < len(counts) {
			errs = append(errs, fmt.Errorf("%s form: counts %v for %v words fit no plausible tokenizer", name, counts, lengths))
			break
		}
		info.Tokenize, info.Template = name, template
		return info
	}
	info.Template = "usage"
	info.Err = errors.Join(errs...)
	return info
}

// tokenizeLlama counts a prompt in llama.cpp's form: the chat template
// applied by /apply-template (chat targets), then /tokenize {"content"}.
func (c *Client) tokenizeLlama(ctx context.Context, text string) (int, string, error) {
	root := serverRoot(c.target.URL)
	template := "none"
	if ChatLike(c.target.API) {
		b, err := c.post(ctx, joinPath(root, "/apply-template"), map[string]any{"messages": []Message{{Role: "user", Content: text}}})
		var out struct {
			Prompt string `json:"prompt"`
		}
		if err == nil && json.Unmarshal(b, &out) == nil && out.Prompt != "" {
			text, template = out.Prompt, "apply-template"
		} else {
			template = "usage"
		}
	}
	b, err := c.post(ctx, joinPath(root, "/tokenize"), map[string]any{"content": text, "add_special": true, "parse_special": true})
	if err != nil {
		return 0, "", fmt.Errorf("llama.cpp form: %w", err)
	}
	// An empty token list (llama.cpp's answer to another form) is no
	// count: parseTokenizeReply says so.
	n, _, err := parseTokenizeReply(b)
	if err != nil {
		return 0, "", fmt.Errorf("llama.cpp form: %w", err)
	}
	return n, template, nil
}

// tokenizeVLLM counts a prompt in vLLM's (and SGLang's) form: the messages
// of a chat request, counted with the model's chat template.
func (c *Client) tokenizeVLLM(ctx context.Context, text string) (int, string, error) {
	body := map[string]any{"model": c.target.Model}
	template := "none"
	if c.target.API == "completions" {
		body["prompt"] = text
	} else {
		body["messages"] = []Message{{Role: "user", Content: text}}
		template = "tokenize"
	}
	b, err := c.post(ctx, joinPath(serverRoot(c.target.URL), "/tokenize"), body)
	if err != nil {
		return 0, "", fmt.Errorf("vLLM form: %w", err)
	}
	n, _, err := parseTokenizeReply(b)
	if err != nil {
		return 0, "", fmt.Errorf("vLLM form: %w", err)
	}
	return n, template, nil
}

// contextLength returns the smallest context length the target states
// (/v1/models' max_model_len for the target's model, llama.cpp's /props
// n_ctx) or is configured with (max_context), and its source.
func (c *Client) contextLength(ctx context.Context) (int, string) {
	best, source := 0, ""
	consider := func(n int, s string) {
		if n > 0 && n <= maxReportedTokens && (best == 0 || n < best) {
			best, source = n, s
		}
	}
	if b, err := c.call(ctx, http.MethodGet, joinPath(c.target.URL, "/models"), nil); err == nil {
		consider(parseModelsContext(b, c.target.Model), "max_model_len")
	}
	if b, err := c.call(ctx, http.MethodGet, joinPath(serverRoot(c.target.URL), "/props"), nil); err == nil {
		consider(parsePropsContext(b), "n_ctx")
	}
	consider(c.target.MaxContext, "max_context")
	return best, source
}

// parseModelsContext returns max_model_len of model in a /v1/models reply
// (vLLM), else of its only model, else 0.
func parseModelsContext(b []byte, model string) int {
	var r struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if json.Unmarshal(b, &r) != nil {
		return 0
	}
	for _, m := range r.Data {
		if m.ID == model {
			return m.MaxModelLen
		}
	}
	if len(r.Data) == 1 {
		return r.Data[0].MaxModelLen
	}
	return 0
}

// parsePropsContext returns n_ctx of a llama.cpp /props reply, 0 if none.
func parsePropsContext(b []byte) int {
	var r struct {
		NCtx     int `json:"n_ctx"`
		Settings struct {
			NCtx int `json:"n_ctx"`
		} `json:"default_generation_settings"`
	}
	if json.Unmarshal(b, &r) != nil {
		return 0
	}
	if r.Settings.NCtx > 0 {
		return r.Settings.NCtx
	}
	return r.NCtx
}
