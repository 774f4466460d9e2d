package prober

// The stream events of the OpenAI Responses API and the Anthropic Messages
// API, read into the same chunk as a chat completion chunk, with the same
// one-pass scanner: no allocation for the common event (a text delta).

// parseChatEvent reads a chat or completions chunk; its SSE event name is
// not used ("error" events are handled by readStream).
func parseChatEvent(_, data []byte, c *chunk, contents bool) error {
	return parseChunk(data, c, contents)
}

// responsesEvent is what one Responses API event holds, before its type
// (which may come after the fields it qualifies) says what they mean.
type responsesEvent struct {
	typ, delta, itemType, itemName, status, reason []byte
	failure                                        []byte // response.error, raw
	outputIndex                                    int64
}

// parseResponsesEvent reads one event of the Responses API's stream
// (https://platform.openai.com/docs/api-reference/responses-streaming):
//
//   - response.output_text.delta, response.refusal.delta: answer text;
//   - response.function_call_arguments.delta: a tool call's arguments
//     (answer text too); response.output_item.added of a function_call
//     names the call;
//   - response.reasoning_text.delta, response.reasoning_summary_text.delta:
//     reasoning;
//   - response.completed and response.incomplete end the stream with the
//     response's usage and model (incomplete_details.reason, e.g.
//     max_output_tokens, as the finish reason); response.failed and error
//     are errors in the stream.
//
// The type comes from the data's "type", else from the SSE event name.
func parseResponsesEvent(name, data []byte, c *chunk, contents bool) error {
	*c = chunk{contents: c.contents[:0], calls: c.calls[:0]}
	var ev responsesEvent
	p := chunkParser{b: data, c: c, contents: contents}
	err := p.event(func(key []byte) error {
		switch string(key) {
		case "type":
			return p.stringInto(&ev.typ)
		case "delta":
			return p.stringInto(&ev.delta)
		case "output_index":
			v, err := p.integer()
			ev.outputIndex = v
			return err
		case "item":
			return p.objectField(func(k []byte) error {
				switch string(k) {
				case "type":
					return p.stringInto(&ev.itemType)
				case "name":
					return p.stringInto(&ev.itemName)
				}
				return p.skip()
			})
		case "response":
			return p.objectField(func(k []byte) error {
				switch string(k) {
				case "usage":
					return p.objectField(p.usage)
				case "model":
					return p.stringInto(&c.model)
				case "status":
					return p.stringInto(&ev.status)
				case "error":
					raw, err := p.raw()
					if string(raw) != "null" {
						ev.failure = raw
					}
					return err
				case "incomplete_details":
					return p.objectField(func(k []byte) error {
						if string(k) == "reason" {
							return p.stringInto(&ev.reason)
						}
						return p.skip()
					})
				}
				return p.skip()
			})
		case "message":
			return p.stringInto(&c.message)
		}
		return p.eventField(key)
	})
	if err != nil {
		return err
	}
	typ := ev.typ
	if len(typ) == 0 {
		typ = name
	}
	switch string(typ) {
	case "response.output_text.delta", "response.refusal.delta":
		p.generated(ev.delta, true, true)
	case "response.function_call_arguments.delta":
		p.toolCall(toolDelta{index: ev.outputIndex, args: ev.delta})
	case "response.reasoning_text.delta", "response.reasoning_summary_text.delta":
		p.generated(ev.delta, false, false)
	case "response.output_item.added":
		if string(ev.itemType) == "function_call" {
			p.toolCall(toolDelta{index: ev.outputIndex, name: ev.itemName})
		}
	case "response.completed", "response.incomplete":
		c.done = true
		c.finish = ev.status
		if len(ev.reason) > 0 {
			c.finish = ev.reason
		}
	case "response.failed":
		c.errRaw = ev.failure
		if c.errRaw == nil {
			c.errRaw = []byte(`"response.failed without an error object"`)
		}
	case "error":
		c.object = []byte("error")
	}
	return nil
}

// parseMessagesEvent reads one event of the Anthropic Messages API's
// stream (https://docs.anthropic.com/en/docs/build-with-claude/streaming):
//
//   - message_start: the model and the input's usage (input_tokens
//     excludes the cached part: the prompt is input_tokens +
//     cache_read_input_tokens + cache_creation_input_tokens, and
//     cache_read_input_tokens is its cached part; message_delta may send
//     them again, cumulative, some of them or all: mergeUsage sums the
//     last of each);
//   - content_block_delta: text_delta (answer text), thinking_delta
//     (reasoning), input_json_delta (a tool call's arguments, answer
//     text); content_block_start of a tool_use block names the call;
//   - message_delta: the stop reason and the output's usage;
//   - message_stop ends the stream; error is an error in the stream.
//
// The type comes from the data's "type", else from the SSE event name.
func parseMessagesEvent(name, data []byte, c *chunk, contents bool) error {
	*c = chunk{contents: c.contents[:0], calls: c.calls[:0]}
	var typ, deltaType, blockType, blockName, text []byte
	var index int64
	c.promptParts = true
	p := chunkParser{b: data, c: c, contents: contents}
	usage := func(k []byte) error {
		switch string(k) {
		case "input_tokens":
			return p.count(&c.prompt, &c.hasPrompt)
		case "cache_read_input_tokens":
			return p.count(&c.cached, &c.hasCached)
		case "cache_creation_input_tokens":
			return p.count(&c.cacheWrite, &c.hasCacheWrite)
		case "output_tokens":
			return p.count(&c.complete, &c.hasComplete)
		}
		return p.skip()
	}
	err := p.event(func(key []byte) error {
		switch string(key) {
		case "type":
			return p.stringInto(&typ)
		case "index":
			v, err := p.integer()
			index = v
			return err
		case "message":
			return p.objectField(func(k []byte) error {
				switch string(k) {
				case "model":
					return p.stringInto(&c.model)
				case "usage":
					return p.objectField(usage)
				}
				return p.skip()
			})
		case "content_block":
			return p.objectField(func(k []byte) error {
				switch string(k) {
				case "type":
					return p.stringInto(&blockType)
				case "name":
					return p.stringInto(&blockName)
				}
				return p.skip()
			})
		case "delta":
			return p.objectField(func(k []byte) error {
				switch string(k) {
				case "type":
					return p.stringInto(&deltaType)
				case "text", "thinking", "partial_json":
					return p.stringInto(&text)
				case "stop_reason":
					return p.stringInto(&c.finish)
				}
				return p.skip()
			})
		case "usage":
			return p.objectField(usage)
		}
		return p.eventField(key)
	})
	if err != nil {
		return err
	}
	if len(typ) == 0 {
		typ = name
	}
	switch string(typ) {
	case "content_block_delta":
		switch string(deltaType) {
		case "text_delta":
			p.generated(text, true, true)
		case "input_json_delta":
			p.toolCall(toolDelta{index: index, args: text})
		case "thinking_delta":
			p.generated(text, false, false)
		}
	case "content_block_start":
		if string(blockType) == "tool_use" {
			p.toolCall(toolDelta{index: index, name: blockName})
		}
	case "message_stop":
		c.done = true
	case "error":
		if c.errRaw == nil {
			c.errRaw = []byte(`"error event without an error object"`)
		}
	}
	return nil
}

// stringInto parses a string into *s (raw contents); a value of another
// type is skipped and leaves *s as it was.
func (p *chunkParser) stringInto(s *[]byte) error {
	if !p.is('"') {
		return p.skip()
	}
	v, err := p.str()
	*s = v
	return err
}

// objectField parses an object with field, or skips a value of another
// type.
func (p *chunkParser) objectField(field func(key []byte) error) error {
	if !p.is('{') {
		return p.skip()
	}
	return p.object(field)
}

// event parses one event's data, a JSON object, calling field for each
// key; field hands the keys it does not know to eventField.
func (p *chunkParser) event(field func(key []byte) error) error {
	p.ws()
	if err := p.object(field); err != nil {
		return err
	}
	if p.ws(); p.i != len(p.b) {
		return p.fail("after the top-level object")
	}
	return nil
}

// eventField parses the fields every API's events may carry: an "error"
// value (an error in the stream: an error event's nested error object,
// {"type": "error", "error": {"message": ...}}, as some OpenAI-compatible
// servers send it, and Anthropic's), the "timings" of
// llama.cpp and the simulator, the simulator's "sim_ts"; it skips others.
func (p *chunkParser) eventField(key []byte) error {
	switch string(key) {
	case "error":
		raw, err := p.raw()
		if string(raw) != "null" {
			p.c.errRaw = raw
		}
		return err
	case "timings":
		raw, err := p.raw()
		if string(raw) != "null" {
			p.c.timings = raw
		}
		return err
	case "sim_ts":
		v, err := p.integer()
		p.c.simTS = v
		return err
	}
	return p.skip()
}
