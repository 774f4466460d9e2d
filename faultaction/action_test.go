package faultaction

import (
	"os"
	"path/filepath"
	"testing"

	commoncfg "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sloprober/sloprober/internal/strictyaml"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func dur(s string) *model.Duration {
	d := model.Duration(0)
	if err := d.Set(s); err != nil {
		panic(err)
	}
	return &d
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    *Action
		want string
	}{
		{"none", &Action{}, "must set exactly one of http, kubernetes, exec; got none"},
		{"nil", nil, "must set exactly one of http, kubernetes, exec; got none"},
		{"two", &Action{HTTP: &HTTPAction{}, Exec: &ExecAction{}}, "must set exactly one of http, kubernetes, exec; got http and exec"},
		{"url relative", &Action{HTTP: &HTTPAction{HTTPRequest: HTTPRequest{URL: "foo"}}}, `http.url: must be an absolute http(s) URL, got "foo"`},
		{"url empty", &Action{HTTP: &HTTPAction{}}, `http.url: must be an absolute http(s) URL, got ""`},
		{"url scheme", &Action{HTTP: &HTTPAction{HTTPRequest: HTTPRequest{URL: "file:///etc/passwd"}}}, `http.url: must be an absolute http(s) URL, got "file:///etc/passwd"`},
		{"url password not echoed", &Action{HTTP: &HTTPAction{HTTPRequest: HTTPRequest{URL: "ftp://u:hunter2@h/"}}}, `http.url: must be an absolute http(s) URL, got "ftp://u:xxxxx@h/"`},
		{"method", &Action{HTTP: &HTTPAction{HTTPRequest: HTTPRequest{Method: "post", URL: "http://h/"}}}, `http.method: must be one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, got "post"`},
		{"header name", &Action{HTTP: &HTTPAction{HTTPRequest: HTTPRequest{URL: "http://h/", Headers: map[string]commoncfg.Secret{"Bad Name": "x"}}}}, `http.headers: "Bad Name" is not a valid header name`},
		{"header value", &Action{HTTP: &HTTPAction{HTTPRequest: HTTPRequest{URL: "http://h/", Headers: map[string]commoncfg.Secret{"Authorization": "Bearer a\r\nX: y"}}}}, `http.headers.Authorization: value has a control character (a line break?)`},
		{"undo url", &Action{HTTP: &HTTPAction{HTTPRequest: HTTPRequest{URL: "http://h/"}, Undo: &HTTPRequest{URL: "/up"}}}, `http.undo.url: must be an absolute http(s) URL, got "/up"`},
		{"http timeout", &Action{HTTP: &HTTPAction{HTTPRequest: HTTPRequest{URL: "http://h/"}, Timeout: -model.Duration(1e9)}}, `http.timeout: must not be negative (0: the default), got -1s`},
		{"namespace", &Action{Kubernetes: &KubernetesAction{Selector: "app=x"}}, "kubernetes.namespace: must be set"},
		{"selector empty", &Action{Kubernetes: &KubernetesAction{Namespace: "llm"}}, "kubernetes.selector: must be set (an empty selector matches every pod)"},
		{"selector bad", &Action{Kubernetes: &KubernetesAction{Namespace: "llm", Selector: "=x"}}, `kubernetes.selector: "=x": found '=', expected: !, identifier, or 'end of string'`},
		{"context without kubeconfig", &Action{Kubernetes: &KubernetesAction{Namespace: "llm", Selector: "app=x", Context: "prod"}}, `kubernetes.context: "prod" needs kubernetes.kubeconfig (in-cluster credentials have no contexts)`},
		{"grace fraction", &Action{Kubernetes: &KubernetesAction{Namespace: "llm", Selector: "app=x", GracePeriod: dur("1500ms")}}, "kubernetes.grace_period: must be whole seconds, 0s or more, got 1s500ms"},
		{"exec empty", &Action{Exec: &ExecAction{}}, `exec.command: must be a non-empty argv list, e.g. ["/usr/local/bin/chaos", "--kill"]`},
		{"exec empty argv0", &Action{Exec: &ExecAction{Command: []string{""}}}, `exec.command: must be a non-empty argv list, e.g. ["/usr/local/bin/chaos", "--kill"]`},
		{"exec undo empty", &Action{Exec: &ExecAction{Command: []string{"true"}, Undo: []string{}}}, "exec.undo: must be a non-empty argv list when set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.a.Validate()
			require.Error(t, err)
			require.EqualError(t, err, tc.want)
		})
	}
}

func TestValidateGood(t *testing.T) {
	for _, a := range []*Action{
		{HTTP: &HTTPAction{HTTPRequest: HTTPRequest{URL: "https://gw.example/admin/replicas/1/drain"}}},
		{HTTP: &HTTPAction{HTTPRequest: HTTPRequest{Method: "DELETE", URL: "http://127.0.0.1:1/x"}, Undo: &HTTPRequest{Method: "PUT", URL: "http://127.0.0.1:1/x"}}},
		{Kubernetes: &KubernetesAction{Namespace: "llm", Selector: "app=vllm,tier notin (canary)", GracePeriod: dur("0s")}},
		{Kubernetes: &KubernetesAction{Namespace: "llm", Selector: "app", Kubeconfig: "/k", Context: "prod"}},
		{Exec: &ExecAction{Command: []string{"true"}, Undo: []string{"true"}}},
	} {
		require.NoError(t, a.Validate(), a.Describe())
	}
}

// The example plans of testdata decode strictly (as the main config
// does) and validate; a misspelt key is an error naming it.
func TestDecodeStrict(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "actions.yml"))
	require.NoError(t, err)
	var as []Action
	require.NoError(t, strictyaml.Unmarshal(b, &as))
	require.Len(t, as, 3)
	var kinds []string
	for _, a := range as {
		require.NoError(t, a.Validate())
		kinds = append(kinds, a.Kind())
	}
	require.Equal(t, []string{"http", "kubernetes", "exec"}, kinds)
	require.Equal(t, "Bearer s3cret", string(as[0].HTTP.Headers["Authorization"]))
	require.True(t, as[0].Undoable())
	require.Equal(t, model.Duration(5e9), *as[1].Kubernetes.GracePeriod)
	require.False(t, as[1].Undoable())
	require.Equal(t, []string{"/usr/local/bin/chaos", "--partition"}, as[2].Exec.Command)

	var bad []Action
	err = strictyaml.Unmarshal([]byte("- http:\n    url: http://h/\n    heders: {A: b}\n"), &bad)
	require.ErrorContains(t, err, "heders")
}

// Describe shows header names, never their values, nor the body, nor a
// URL's password.
func TestDescribe(t *testing.T) {
	a := &Action{HTTP: &HTTPAction{
		HTTPRequest: HTTPRequest{
			URL:     "http://admin:pw123@127.0.0.1:9/replicas/1/down",
			Headers: map[string]commoncfg.Secret{"Authorization": "Bearer tok-123", "X-Api-Key": "key-456"},
			Body:    `{"secret":"body-789"}`,
		},
		Undo: &HTTPRequest{Method: "DELETE", URL: "http://127.0.0.1:9/replicas/1/down", Headers: map[string]commoncfg.Secret{"Authorization": "Bearer tok-123"}},
	}}
	d := a.Describe()
	require.Equal(t, "http POST http://admin:xxxxx@127.0.0.1:9/replicas/1/down (headers Authorization, X-Api-Key; body 21 bytes); undo DELETE http://127.0.0.1:9/replicas/1/down (headers Authorization)", d)
	for _, secret := range []string{"tok-123", "key-456", "body-789", "pw123"} {
		require.NotContains(t, d, secret)
	}
	require.Equal(t, "http DELETE http://127.0.0.1:9/replicas/1/down (headers Authorization)", a.describeUndo())

	k := &Action{Kubernetes: &KubernetesAction{Namespace: "llm", Selector: "app=vllm", DryRun: true, GracePeriod: dur("0s")}}
	require.Equal(t, `kubernetes delete one pod in namespace "llm" matching "app=vllm" with grace period 0s (dry run) with in-cluster credentials`, k.Describe())
	e := &Action{Exec: &ExecAction{Command: []string{"tc", "qdisc", "add dev"}, Undo: []string{"tc"}}}
	require.Equal(t, `exec ["tc" "qdisc" "add dev"]; undo ["tc"]`, e.Describe())
	require.Equal(t, "no action", (&Action{}).Describe())
}
