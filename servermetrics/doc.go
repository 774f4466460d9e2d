// Package servermetrics reads an engine's own /metrics (a target's
// optional server_metrics section) and re-exports a few of its numbers
// beside sloprober's, with the target label: what the engine says of its
// batch, queue and caches explains what the probes measure.
//
// Known names of vLLM, SGLang, TGI and llama.cpp (see engines) map to
//
//	sloprober_server_requests_running{target}        gauge, summed over label sets
//	sloprober_server_requests_waiting{target}        gauge (queue depth), summed
//	sloprober_server_kv_cache_usage_ratio{target}    gauge, 0..1, mean over label sets
//	sloprober_server_prefix_cache_hit_ratio{target}  gauge, 0..1
//
// and every scrape is accounted for by
//
//	sloprober_server_metrics_up{target}
//	sloprober_server_metrics_scrape_duration_seconds{target}
//	sloprober_server_metrics_scrape_failures_total{target,reason}
//	sloprober_server_metrics_scrapes_skipped_total{target}
//	sloprober_server_metrics_values_rejected_total{target}
//
// Rules:
//   - Never invented: a value the engine does not serve is absent, not 0.
//     Only the names of one engine are read (the first of vLLM, SGLang,
//     TGI, llama.cpp that has a mapped name); where an engine has an old
//     and a new name, the new one is used and the old only without it.
//   - Several label sets (one per served model, or per engine of a
//     data-parallel deployment): request counts are summed, since the
//     endpoint's requests are those of all of them; usage ratios are
//     averaged, since each engine has a cache of the same size (vLLM's own
//     log line averages them too), and a sum would pass 1. A known limit:
//     SGLang started with --enable-metrics-for-all-schedulers and tensor
//     parallelism without DP attention reports the same batch once per TP
//     rank, and the sum counts it once per rank.
//   - Values: NaN, ±Inf and negative values, counts above MaxCount and
//     ratios above 1+RatioSlack are rejected: the quantity is absent for
//     that scrape, the scrape still counts as up, and
//     values_rejected_total and a (rate-limited) warning say so. A ratio
//     in (1, 1+RatioSlack] reads as 1. vLLM's *_perc gauges are fractions
//     (HELP: "1 means 100 percent usage"); a value such as 85 is rejected,
//     not divided by 100. vLLM V0 without prefix caching says -1 for its
//     hit-rate gauge: absent, not rejected.
//   - The prefix-cache hit ratio is the increase of the hit counter over
//     that of the query counter between the last two successful scrapes
//     (vLLM's prefix_cache_hits/queries, SGLang's
//     cached_tokens/prompt_tokens; a decrease is an engine restart, and the increase is
//     then the new value). Without counters, or without a query in
//     between, the engine's own gauge is used (vLLM V0's
//     gpu_prefix_cache_hit_rate, SGLang's cache_hit_rate), else it is
//     absent.
//   - A failed scrape (see Reasons) sets up to 0 and deletes the four
//     values, as Prometheus marks the series of a failed scrape stale: a
//     dashboard must not show a silent server's last numbers as current.
//     Latest has no snapshot then either. The hit ratio's counters of the
//     last good scrape are kept, so the next good one covers the gap.
//   - A body that is not an exposition (an HTML page, JSON, a wrong
//     Content-Type, a syntax error) or has two series with the same
//     labels under a mapped name fails the scrape with reason parse.
//     The text format is asked for; an OpenMetrics reply is read by the
//     same parser once its comment lines and exemplars are dropped (see
//     exposition.FromOpenMetrics for why expfmt's OpenMetrics decoder is
//     not used).
//
// Wiring: NewMetrics(reg) once; NewManager(logger, metrics); Apply(cfg) on
// every (re)load, before or after Run; Run(ctx) as an oklog/run actor.
// Manager.Queue(target) is a capacity.QueueProbe.
//
// Bounds on the scrape are in bounds.go: MaxBodyBytes, MaxSamples, the
// configured timeout (at most the interval), MaxCount, MaxCounter and
// RatioSlack for values, QueueReadEvery for the drain check's reads, and
// LogEvery for warnings.
package servermetrics
