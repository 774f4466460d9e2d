package tracing

import (
	"go.opentelemetry.io/otel/attribute"
	genai "go.opentelemetry.io/otel/semconv/v1.41.0"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// The attribute names of a probe's spans, in one place. The OpenTelemetry
// GenAI semantic conventions are still in development and rename keys
// between releases (gen_ai.system became gen_ai.provider.name, and the
// GenAI group left the main semconv package in v1.43.0): sloprober takes
// them from pinned semconv packages here, so that following a rename is a
// change of this file. The resource's schema is the SDK's (v1.43.0).
const semconvSchemaURL = semconv.SchemaURL

// GenAI and general semantic-convention keys.
var (
	keyOperation        = genai.GenAIOperationNameKey
	keyProvider         = genai.GenAIProviderNameKey
	keyRequestModel     = genai.GenAIRequestModelKey
	keyResponseModel    = genai.GenAIResponseModelKey
	keyMaxTokens        = genai.GenAIRequestMaxTokensKey
	keyStream           = genai.GenAIRequestStreamKey
	keyTimeToFirstChunk = genai.GenAIResponseTimeToFirstChunkKey
	keyFinishReasons    = genai.GenAIResponseFinishReasonsKey
	keyInputTokens      = genai.GenAIUsageInputTokensKey
	keyOutputTokens     = genai.GenAIUsageOutputTokensKey
	keyCacheReadTokens  = genai.GenAIUsageCacheReadInputTokensKey
	keyServerAddress    = semconv.ServerAddressKey
	keyServerPort       = semconv.ServerPortKey
	keyErrorType        = semconv.ErrorTypeKey
	keyStatusCode       = semconv.HTTPResponseStatusCodeKey
	keyServiceName      = semconv.ServiceNameKey
	keyServiceVersion   = semconv.ServiceVersionKey
	keyServiceInstance  = semconv.ServiceInstanceIDKey
)

// Operation names (gen_ai.operation.name) by the target's API.
var operations = map[string]string{
	"chat":        genai.GenAIOperationNameChat.Value.AsString(),
	"completions": genai.GenAIOperationNameTextCompletion.Value.AsString(),
	"responses":   genai.GenAIOperationNameChat.Value.AsString(),
	"messages":    genai.GenAIOperationNameChat.Value.AsString(),
}

// defaultProvider is gen_ai.provider.name of a target whose metadata does
// not name one (metadata key "provider"): the provider whose API the
// target speaks, OpenAI's but for the Messages API.
func defaultProvider(api string) string {
	if api == "messages" {
		return genai.GenAIProviderNameAnthropic.Value.AsString()
	}
	return genai.GenAIProviderNameOpenAI.Value.AsString()
}

// sloprober's own keys.
const (
	keyTarget       = attribute.Key("sloprober.target")
	keyScenario     = attribute.Key("sloprober.scenario")
	keyTest         = attribute.Key("sloprober.test")
	keyOutcome      = attribute.Key("sloprober.outcome")
	keyVerdict      = attribute.Key("sloprober.verdict")
	keySLOsMissed   = attribute.Key("sloprober.slo_missed")
	keyLag          = attribute.Key("sloprober.schedule_lag")
	keyRequestID    = attribute.Key("sloprober.request_id")
	keyError        = attribute.Key("sloprober.error")
	keySource       = attribute.Key("sloprober.phase.source")
	keyClientOnly   = attribute.Key("sloprober.timing.client_only")
	keyRejected     = attribute.Key("sloprober.timing.rejected")
	keyHeadSampled  = attribute.Key("sloprober.head_sampled")
	keyStallGap     = attribute.Key("sloprober.stall.gap")
	keyStallIndex   = attribute.Key("sloprober.stall.chunk")
	keyStallsCount  = attribute.Key("sloprober.stalls")
	keyServerHeader = attribute.Key("sloprober.server")
	keyTTFA         = attribute.Key("sloprober.time_to_first_answer_token")
	keyReasoning    = attribute.Key("sloprober.usage.reasoning_tokens")
	keyCheck        = attribute.Key("sloprober.check")
	keyCheckPassed  = attribute.Key("sloprober.check.passed")
	keyCheckReason  = attribute.Key("sloprober.check.reason")
	keyFingerprint  = attribute.Key("sloprober.system_fingerprint")
)

// Verdicts (sloprober.verdict).
const (
	verdictGood       = "good"
	verdictBad        = "bad"
	verdictNotCounted = "not_counted" // cancelled or shut down: outside attainment
)

// Event names.
const (
	eventFirstToken = "first_token"
	// eventFirstAnswer marks the first answer token after reasoning.
	eventFirstAnswer = "first_answer_token"
	eventStall       = "stall"
)
