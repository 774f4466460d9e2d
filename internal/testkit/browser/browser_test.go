package browser_test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sloprober/sloprober/internal/testkit/browser"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// needChromium fails the test when Chromium is missing, naming the install
// script: a machine that runs the tests must have the browser (the Makefile
// installs it), and a skip would hide that reports go unchecked. Only an
// explicit SLOPROBER_SKIP_BROWSER=1 skips.
func needChromium(t *testing.T) {
	t.Helper()
	if os.Getenv("SLOPROBER_SKIP_BROWSER") == "1" {
		t.Skip("SLOPROBER_SKIP_BROWSER=1")
	}
	_, err := browser.Path()
	require.NoError(t, err)
}

// isolate points TMPDIR, where the browser's temporary profile goes, at an
// empty directory, and checks after the test that the profile is gone and no
// process of the browser is left.
func isolate(t *testing.T) {
	t.Helper()
	// Not t.TempDir: its path holds the test's name, and the path of the
	// socket that Chromium creates in TMPDIR must fit in 108 bytes.
	dir, err := os.MkdirTemp("", "browser")
	require.NoError(t, err)
	t.Setenv("TMPDIR", dir)
	t.Cleanup(func() {
		defer os.RemoveAll(dir)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		require.Empty(t, names, "files left in the temporary directory")
		require.Empty(t, processesUsing(t, dir), "browser processes left")
	})
}

// processesUsing lists the processes whose command line mentions dir.
func processesUsing(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil // Not Linux: nothing to check.
	}
	var found []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(dir)) {
			found = append(found, e.Name()+": "+string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
		}
	}
	return found
}

func render(t *testing.T, path string, opts browser.Options) *browser.Page {
	t.Helper()
	p, err := browser.Render(context.Background(), path, opts)
	require.NoError(t, err)
	return p
}

func decode(t *testing.T, data []byte) image.Image {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(data))
	require.NoError(t, err)
	return img
}

func blank(t *testing.T, data []byte) bool {
	t.Helper()
	b, err := browser.Blank(data)
	require.NoError(t, err)
	return b
}

func TestRenderSelfContainedReport(t *testing.T) {
	needChromium(t)
	isolate(t)

	p := render(t, "testdata/report.html", browser.Options{Count: []string{"table tr", ".bar", "img"}})

	require.Empty(t, p.ConsoleMessages)
	require.Empty(t, p.Requests)
	require.Equal(t, "sloprober report: checkout-api", p.Title)
	require.Contains(t, p.Text, "Capacity report: checkout-api")
	require.Contains(t, p.Text, "Print this page")
	require.Equal(t, 2, p.SVGs)
	require.Equal(t, map[string]int{"table tr": 3, ".bar": 3, "img": 0}, p.Counts)
	// It fits a laptop screen: no horizontal scroll bar.
	require.Equal(t, browser.DefaultWidth, p.ScrollWidth)
	require.Positive(t, p.ScrollHeight)

	img := decode(t, p.Screenshot)
	require.Equal(t, browser.DefaultWidth, img.Bounds().Dx())
	require.GreaterOrEqual(t, img.Bounds().Dy(), browser.DefaultHeight)
	require.False(t, blank(t, p.Screenshot), "the report rendered blank")
}

func TestRenderScriptError(t *testing.T) {
	needChromium(t)

	p := render(t, "testdata/script-error.html", browser.Options{})

	errs := p.Errors()
	require.Len(t, errs, 1, "%v", p.ConsoleMessages)
	require.Equal(t, "exception", errs[0].Source)
	require.Contains(t, errs[0].Text, "drawCharts is not defined")
	require.True(t, strings.HasSuffix(errs[0].URL, "/testdata/script-error.html"), errs[0].URL)
	var warned bool
	for _, m := range p.ConsoleMessages {
		warned = warned || m.Level == "warning" && m.Source == "console" && m.Text == "drawing charts"
	}
	require.True(t, warned, "console.warn not reported: %v", p.ConsoleMessages)
	require.Empty(t, p.Requests)
}

// TestRenderExternalResources renders a page that loads a stylesheet and an
// image from a server on loopback, as a report that forgot to inline them
// would: the requests must show, and the report's CSP must block them.
func TestRenderExternalResources(t *testing.T) {
	needChromium(t)

	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch r.URL.Path {
		case "/style.css":
			w.Header().Set("Content-Type", "text/css")
			fmt.Fprint(w, "body { background: #eef; }")
		case "/chart.png":
			w.Header().Set("Content-Type", "image/png")
			// Not require: FailNow must not run on the handler's goroutine.
			if err := png.Encode(w, image.NewRGBA(image.Rect(0, 0, 8, 8))); err != nil {
				t.Error(err)
			}
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	require.True(t, strings.HasPrefix(srv.URL, "http://127.0.0.1:"), srv.URL)
	css, chart := srv.URL+"/style.css", srv.URL+"/chart.png"

	page := func(csp bool) string {
		meta := ""
		if csp {
			meta = `<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">`
		}
		path := filepath.Join(t.TempDir(), fmt.Sprintf("external-%t.html", csp))
		html := `<!DOCTYPE html><html><head><meta charset="utf-8">` + meta + `
<title>external</title><link rel="stylesheet" href="` + css + `"></head>
<body><p>Chart:</p><img src="` + chart + `" alt="chart"></body></html>`
		require.NoError(t, os.WriteFile(path, []byte(html), 0o644))
		return path
	}

	t.Run("no CSP", func(t *testing.T) {
		hits.Store(0)
		p := render(t, page(false), browser.Options{})
		require.Equal(t, []browser.Request{
			{URL: css, Type: "Stylesheet"},
			{URL: chart, Type: "Image"},
		}, p.Requests)
		require.EqualValues(t, 2, hits.Load(), "the browser did not fetch what it reported")
		require.Empty(t, p.Errors())
	})

	t.Run("CSP", func(t *testing.T) {
		hits.Store(0)
		p := render(t, page(true), browser.Options{})
		require.Equal(t, []browser.Request{
			{URL: css, Type: "Stylesheet", Blocked: "csp"},
			{URL: chart, Type: "Image", Blocked: "csp"},
		}, p.Requests)
		require.Zero(t, hits.Load(), "the CSP did not block the requests")
		errs := p.Errors()
		require.Len(t, errs, 2, "%v", p.ConsoleMessages)
		for i, u := range []string{css, chart} {
			require.Equal(t, "security", errs[i].Source)
			require.Contains(t, errs[i].Text, u)
			require.Contains(t, errs[i].Text, "Content Security Policy")
		}
	})
}

func TestRenderBlankPage(t *testing.T) {
	needChromium(t)
	isolate(t)

	p := render(t, "testdata/blank.html", browser.Options{})

	require.Empty(t, p.ConsoleMessages)
	require.Empty(t, p.Requests)
	require.Empty(t, p.Text)
	require.Zero(t, p.SVGs)
	img := decode(t, p.Screenshot)
	require.Equal(t, image.Rect(0, 0, browser.DefaultWidth, browser.DefaultHeight), img.Bounds())
	require.True(t, blank(t, p.Screenshot), "a page with nothing on it is not blank")
}

func TestRenderOptions(t *testing.T) {
	needChromium(t)

	p := render(t, "testdata/report.html", browser.Options{Width: 400, Height: 300, Print: true})

	// The report's print stylesheet hides what is for the screen only.
	require.Contains(t, p.Text, "Capacity report: checkout-api")
	require.NotContains(t, p.Text, "Print this page")
	// Its 600-pixel charts overflow a 400-pixel viewport.
	require.Greater(t, p.ScrollWidth, 400)
	require.Greater(t, p.ScrollHeight, 300)
	img := decode(t, p.Screenshot)
	require.Equal(t, p.ScrollWidth, img.Bounds().Dx())
	require.Equal(t, p.ScrollHeight, img.Bounds().Dy())
}

// TestRenderTimeout renders a page whose image never arrives: Render must
// give up at the timeout, and still stop the browser and remove its profile.
func TestRenderTimeout(t *testing.T) {
	needChromium(t)
	isolate(t)

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // The browser's death ends the request.
	}))
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "hang.html")
	require.NoError(t, os.WriteFile(path, []byte(`<!DOCTYPE html><img src="`+srv.URL+`/never.png">`), 0o644))

	const timeout = 2 * time.Second
	start := time.Now()
	_, err := browser.Render(context.Background(), path, browser.Options{Timeout: timeout})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), timeout+10*time.Second, "Render outlived its timeout")
}

func TestRenderMissingFile(t *testing.T) {
	_, err := browser.Render(context.Background(), "testdata/no-such-file.html", browser.Options{})
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestPathNamesTheInstallScript(t *testing.T) {
	t.Setenv(browser.EnvPath, filepath.Join(t.TempDir(), "no-chromium"))
	_, err := browser.Path()
	require.ErrorIs(t, err, browser.ErrNotFound)
	require.ErrorContains(t, err, "scripts/install-chromium.sh")

	_, err = browser.Render(context.Background(), "testdata/report.html", browser.Options{})
	require.ErrorIs(t, err, browser.ErrNotFound)
}

func TestBlank(t *testing.T) {
	encode := func(img image.Image) []byte {
		var buf bytes.Buffer
		require.NoError(t, png.Encode(&buf, img))
		return buf.Bytes()
	}
	grey := color.NRGBA{0xf4, 0xf4, 0xf4, 0xff}
	for _, tc := range []struct {
		name string
		img  func() image.Image
		want bool
	}{
		{"uniform", func() image.Image {
			img := image.NewNRGBA(image.Rect(0, 0, 64, 32))
			for i := range img.Pix {
				img.Pix[i] = 0xf4
			}
			return img
		}, true},
		{"one pixel differs", func() image.Image {
			img := image.NewNRGBA(image.Rect(0, 0, 64, 32))
			for y := range 32 {
				for x := range 64 {
					img.Set(x, y, grey)
				}
			}
			img.Set(63, 31, color.Black)
			return img
		}, false},
		{"paletted uniform", func() image.Image {
			return image.NewPaletted(image.Rect(0, 0, 16, 16), color.Palette{grey, color.Black})
		}, true},
		{"paletted not uniform", func() image.Image {
			img := image.NewPaletted(image.Rect(0, 0, 16, 16), color.Palette{grey, color.Black})
			img.SetColorIndex(5, 7, 1)
			return img
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := browser.Blank(encode(tc.img()))
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}

	_, err := browser.Blank([]byte("not a png"))
	require.ErrorContains(t, err, "decoding the screenshot")
}
