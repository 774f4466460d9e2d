package prober

import (
	"net/http"
	"strings"

	"github.com/sloprober/sloprober/config"
)

// wireAPI is how sloprober speaks one of the target APIs (the target's
// api key): where a request goes, what its body and headers are, and how
// each event of the reply's stream is read into a chunk. Everything after
// that (bounds, timing, measurement) is the same for every API, so a
// Responses or Messages target is measured by the same contract as a chat
// target: t1 is the first event carrying generated text of any kind
// (reasoning, answer or tool-call arguments), the answer starts at the
// first content or tool-call delta, the stream is done at the API's own end
// event.
type wireAPI struct {
	// path is appended to the target's URL.
	path string
	// body returns the request body's fields, without the common ones
	// (model, stream) the client adds.
	body func(t *config.TargetConfig, req *Request) map[string]any
	// header adds the API's own request headers (t's http_headers are
	// added after it, by its round tripper).
	header func(t *config.TargetConfig, h http.Header)
	// parse reads one SSE event's data (and its event name) into c; with
	// contents, the answer's text is kept.
	parse func(name, data []byte, c *chunk, contents bool) error
	// end names the stream's end, for "stream ended without ...".
	end string
}

// AnthropicVersion is the anthropic-version header a Messages request
// carries when the target's http_headers do not set one: the version
// Anthropic's Messages API documents for its current request shape.
const AnthropicVersion = "2023-06-01"

// apiOf returns the wire API of a target's api key (validated by config).
func apiOf(name string) *wireAPI {
	switch name {
	case "completions":
		return &completionsAPI
	case "responses":
		return &responsesAPI
	case "messages":
		return &messagesAPI
	}
	return &chatAPI
}

var (
	chatAPI = wireAPI{
		path: "/chat/completions",
		body: func(t *config.TargetConfig, req *Request) map[string]any {
			return map[string]any{
				"messages":       requestMessages(req),
				"stream_options": map[string]any{"include_usage": true},
				t.MaxTokensField: req.OutputTokens,
			}
		},
		parse: parseChatEvent,
		end:   "[DONE]",
	}
	completionsAPI = wireAPI{
		path: "/completions",
		body: func(t *config.TargetConfig, req *Request) map[string]any {
			prompt := req.Prompt
			if req.Check != nil {
				prompt += "\n\n" + req.Check.Question
			}
			return map[string]any{
				"prompt":         prompt,
				"stream_options": map[string]any{"include_usage": true},
				t.MaxTokensField: req.OutputTokens,
			}
		},
		parse: parseChatEvent,
		end:   "[DONE]",
	}
	// responsesAPI is OpenAI's Responses API: the messages as input items,
	// max_output_tokens, usage always in response.completed.
	responsesAPI = wireAPI{
		path: "/responses",
		body: func(_ *config.TargetConfig, req *Request) map[string]any {
			return map[string]any{
				"input":             requestMessages(req),
				"max_output_tokens": req.OutputTokens,
			}
		},
		parse: parseResponsesEvent,
		end:   "response.completed",
	}
	// messagesAPI is Anthropic's Messages API: system messages go in the
	// system field, max_tokens is required, usage comes in message_start
	// (input) and message_delta (output).
	messagesAPI = wireAPI{
		path: "/messages",
		body: func(_ *config.TargetConfig, req *Request) map[string]any {
			var system []string
			var msgs []Message
			for _, m := range requestMessages(req) {
				if m.Role == "system" || m.Role == "developer" {
					system = append(system, m.Content)
					continue
				}
				msgs = append(msgs, m)
			}
			b := map[string]any{"messages": msgs, "max_tokens": req.OutputTokens}
			if system != nil {
				b["system"] = strings.Join(system, "\n\n")
			}
			return b
		},
		header: func(t *config.TargetConfig, h http.Header) {
			if !configuresHeader(t, "Anthropic-Version") {
				h.Set("Anthropic-Version", AnthropicVersion)
			}
		},
		parse: parseMessagesEvent,
		end:   "message_stop",
	}
)

// requestMessages returns the messages of a request: a conversation's
// history, or the prompt as one user message.
func requestMessages(req *Request) []Message {
	if req.Messages != nil {
		return req.Messages
	}
	return []Message{{Role: "user", Content: req.Prompt}}
}

// ChatLike reports whether an API takes messages (chat, responses,
// messages) rather than a bare prompt (completions): conversations and
// chat templates apply to it.
func ChatLike(api string) bool { return api != "completions" }

// configuresHeader reports whether the target's http_headers set the header
// name (its round tripper adds them to every request, after the API's own).
func configuresHeader(t *config.TargetConfig, name string) bool {
	if t.HTTPClientConfig.HTTPHeaders == nil {
		return false
	}
	for k := range t.HTTPClientConfig.HTTPHeaders.Headers {
		if http.CanonicalHeaderKey(k) == http.CanonicalHeaderKey(name) {
			return true
		}
	}
	return false
}
