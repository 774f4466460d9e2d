// Package browser renders a local HTML file in a real headless Chromium and
// reports what a person opening it would get: console errors, requests that
// left the file, a screenshot, the visible text and a few element counts.
//
// sloprober's HTML reports are single self-contained files (inline CSS and
// SVG, a Content-Security-Policy that forbids everything else). Checking the
// markup as text cannot tell a report that renders from one that shows a blank
// page or quietly fetches a stylesheet from the network, so the tests render
// it in the browser people use.
package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// Defaults of Options: a laptop screen, and a bound that a healthy render of
// a report (about a second) never gets near.
const (
	DefaultWidth   = 1280
	DefaultHeight  = 800
	DefaultTimeout = 30 * time.Second
)

// maxScreenshotHeight bounds the full-page screenshot, in CSS pixels. Chromium
// cannot capture a surface taller than its maximum texture size (16384), and a
// report that tall is broken anyway: ScrollHeight tells the caller.
const maxScreenshotHeight = 16384

// closeTimeout bounds how long Render waits for Chromium to quit before it
// kills it.
const closeTimeout = 5 * time.Second

// EnvPath names the environment variable that overrides where Path looks for
// the browser.
const EnvPath = "SLOPROBER_CHROMIUM"

// ErrNotFound is returned by Path, and so by Render, when no Chromium is
// installed.
var ErrNotFound = errors.New("chromium not found: run scripts/install-chromium.sh (or set " + EnvPath + " to the browser binary)")

// Options changes how Render renders a page. The zero value renders at
// DefaultWidth×DefaultHeight on screen media within DefaultTimeout.
type Options struct {
	// Width and Height are the viewport in CSS pixels.
	Width, Height int
	// Print emulates the "print" CSS media type, to check what a report's
	// print stylesheet hides or shows. The layout stays on the viewport:
	// it is not split into paper pages.
	Print bool
	// Count lists CSS selectors whose number of matching elements Render
	// reports in Page.Counts.
	Count []string
	// Timeout bounds the whole render, browser start and shutdown included.
	Timeout time.Duration
}

// Page is what Render saw of a page.
type Page struct {
	// ConsoleMessages holds the errors and warnings of the page: calls of
	// console.error and console.warn, uncaught exceptions, and the browser's
	// own messages, such as a resource blocked by the Content-Security-Policy
	// or one that failed to load.
	ConsoleMessages []ConsoleMessage
	// Requests holds every request the page made other than for the file
	// itself, data: URLs excluded, in the order the page made them. A
	// self-contained report makes none.
	Requests []Request
	// Screenshot is a PNG of the whole page, not only the viewport.
	Screenshot []byte
	// Title is document.title and Text is document.body.innerText: the text
	// a person sees, without what CSS hides.
	Title, Text string
	// SVGs is the number of svg elements, charts included.
	SVGs int
	// Counts maps each selector of Options.Count to its number of elements.
	Counts map[string]int
	// ScrollWidth and ScrollHeight are the document's size in CSS pixels. A
	// ScrollWidth above the viewport's width means a horizontal scroll bar.
	ScrollWidth, ScrollHeight int
}

// ConsoleMessage is an error or a warning of the page.
type ConsoleMessage struct {
	// Level is "error" or "warning".
	Level string
	// Source is "console" for a call of the console API, "exception" for an
	// uncaught exception, or the browser log's source, such as "security"
	// (a Content-Security-Policy violation) or "network".
	Source string
	Text   string
	// URL and Line tell where the message came from, when Chromium knows:
	// the resource that failed to load, or the script. Line counts from 0.
	URL  string
	Line int64
}

// String returns the message with where it came from: Chromium's message
// for a resource that failed to load does not name the resource.
func (m ConsoleMessage) String() string {
	s := fmt.Sprintf("%s (%s): %s", m.Level, m.Source, m.Text)
	switch {
	case m.URL != "" && m.Line > 0:
		s += fmt.Sprintf(" [%s:%d]", m.URL, m.Line+1)
	case m.URL != "":
		s += " [" + m.URL + "]"
	}
	return s
}

// Request is a request that the page made.
type Request struct {
	URL string
	// Type is Chromium's resource type, such as "Image", "Stylesheet",
	// "Script" or "WebSocket".
	Type string
	// Error is Chromium's error for a request that failed, such as
	// "net::ERR_FILE_NOT_FOUND"; empty for one that loaded, one that
	// Chromium blocked, and a WebSocket (whose failure is only a console
	// message).
	Error string
	// Blocked is why Chromium blocked the request without sending it, such
	// as "csp" for one that the page's Content-Security-Policy forbids.
	Blocked string
}

// Errors returns the console messages of level "error".
func (p *Page) Errors() []ConsoleMessage {
	var errs []ConsoleMessage
	for _, m := range p.ConsoleMessages {
		if m.Level == "error" {
			errs = append(errs, m)
		}
	}
	return errs
}

// Path returns the Chromium binary that Render runs: the one that
// SLOPROBER_CHROMIUM names, else the first of chromium, chromium-browser and
// google-chrome on the PATH. It returns an error wrapping ErrNotFound when
// there is none.
func Path() (string, error) {
	if p := os.Getenv(EnvPath); p != "" {
		// An explicit choice that does not work is an error, not a reason
		// to test with some other browser.
		found, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("%s=%q: %w: %w", EnvPath, p, err, ErrNotFound)
		}
		return found, nil
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if found, err := exec.LookPath(name); err == nil {
			return found, nil
		}
	}
	return "", fmt.Errorf("no chromium, chromium-browser or google-chrome on the PATH: %w", ErrNotFound)
}

// Render opens the HTML file at path in a new headless Chromium, waits for
// the page to load, and returns what it saw. Every call starts its own
// browser with a fresh temporary profile, so that no render sees another's
// cache or cookies, and stops it and removes the profile before it returns,
// on every path out.
//
// Render fails when the browser does not start or the file does not load; a
// page that loads but is broken is for the caller to judge from the Page.
func Render(ctx context.Context, path string, opts Options) (_ *Page, err error) {
	if opts.Width <= 0 {
		opts.Width = DefaultWidth
	}
	if opts.Height <= 0 {
		opts.Height = DefaultHeight
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", path, err)
	}
	// Navigating to a missing file gives Chromium's error page, not an
	// error: check first.
	if _, err := os.Stat(abs); err != nil {
		return nil, fmt.Errorf("rendering %s: %w", path, err)
	}
	exe, err := Path()
	if err != nil {
		return nil, err
	}
	fileURL := (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String()

	// Chromium keeps more than the profile in TMPDIR (the socket of its
	// single-instance lock, shared memory files) and removes it only when it
	// exits gracefully, which a browser killed at the timeout does not. So it
	// gets a TMPDIR of its own, removed once it is dead. The name is short
	// because the socket's path must fit in 108 bytes.
	tmp, err := os.MkdirTemp("", "chromium-")
	if err != nil {
		return nil, fmt.Errorf("creating the browser's temporary directory: %w", err)
	}
	defer func() {
		if rerr := os.RemoveAll(tmp); rerr != nil {
			err = errors.Join(err, fmt.Errorf("removing the browser's temporary directory: %w", rerr))
		}
	}()

	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	p, err := render(ctx, exe, tmp, fileURL, opts)
	switch {
	case err == nil:
		return p, nil
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return nil, fmt.Errorf("rendering %s within %v: %w", path, opts.Timeout, err)
	default:
		return nil, fmt.Errorf("rendering %s: %w", path, err)
	}
}

// render runs a browser for Render. When it returns, the browser and every
// process it started are dead and its profile is removed.
func render(ctx context.Context, exe, tmp, fileURL string, opts Options) (*Page, error) {
	// The allocator creates the temporary profile (--user-data-dir) and,
	// when the browser ends, kills what is left of its processes and
	// removes the profile; the cancel funcs wait for that. The browser's
	// life is bound to ctx, so the timeout kills it too.
	allocCtx, allocCancel := chromedp.NewExecAllocator(ctx, allocatorOptions(exe, tmp, opts)...)
	defer allocCancel()
	rec := &recorder{self: fileURL}
	tabCtx, tabCancel := chromedp.NewContext(allocCtx, chromedp.WithListener(rec.listen))
	defer tabCancel()

	var info pageInfo
	var shot []byte
	err := chromedp.Do(tabCtx,
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			return setup(ctx, t, opts)
		}),
		chromedp.Navigate(fileURL),
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			var err error
			if info, err = chromedp.Evaluate[pageInfo](inspectJS(opts.Count))(ctx, t); err != nil {
				return fmt.Errorf("inspecting the page: %w", err)
			}
			shot, err = screenshot(ctx, t)
			return err
		}),
	)
	if err != nil {
		return nil, err
	}
	// Ask the browser to quit, so that it stops its child processes itself:
	// killing it leaves them holding its output pipe, and chromedp waits a
	// second for that before it kills them too. If Chromium does not quit in
	// time, the deferred cancels kill it, so the error changes nothing.
	closeCtx, closeCancel := context.WithTimeout(tabCtx, closeTimeout)
	_ = chromedp.Cancel(closeCtx)
	closeCancel()

	p := &Page{
		Screenshot:   shot,
		Title:        info.Title,
		Text:         info.Text,
		SVGs:         info.SVGs,
		Counts:       info.Counts,
		ScrollWidth:  info.ScrollWidth,
		ScrollHeight: info.ScrollHeight,
	}
	// Every event up to the last command's answer has reached the recorder:
	// chromedp hands a tab's events and answers to their receivers in the
	// order they arrive.
	p.ConsoleMessages, p.Requests = rec.result()
	return p, nil
}

// allocatorOptions returns the browser's command line: chromedp's defaults
// (after Puppeteer's: headless, no extensions, no background timers) and the
// flags that keep a render from touching anything but the page.
func allocatorOptions(exe, tmp string, opts Options) []chromedp.ExecAllocatorOption {
	return append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.Env("TMPDIR="+tmp),
		chromedp.WindowSize(opts.Width, opts.Height),
		// The tests run as root, where Chromium's sandbox refuses to
		// start, and in containers without user namespaces; the page is
		// sloprober's own report.
		chromedp.NoSandbox,
		// No GPU on CI machines; software rendering draws the same.
		chromedp.Flag("disable-gpu", true),
		// Chromium's own traffic: updates, sync, field trials, metrics.
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		// Nothing a page asks for may leave the machine: requests to any
		// host but loopback go to a proxy on a closed loopback port and
		// fail at once, and no name but localhost resolves. Loopback
		// stays reachable (Chromium never proxies it), so that tests can
		// serve resources from 127.0.0.1. A report should make no request
		// at all; Page.Requests still lists the ones it tried.
		chromedp.ProxyServer("http://127.0.0.1:9"),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1"),
	)
}

// setup fixes the viewport, whatever the window manager and the display's
// scale make of --window-size, and the media type, before the page loads.
func setup(ctx context.Context, t *chromedp.Target, opts Options) error {
	if _, err := cdp.Call(ctx, t, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{
		Width:             int64(opts.Width),
		Height:            int64(opts.Height),
		DeviceScaleFactor: 1,
	}); err != nil {
		return fmt.Errorf("setting the viewport to %dx%d: %w", opts.Width, opts.Height, err)
	}
	if opts.Print {
		if _, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{Media: "print"}); err != nil {
			return fmt.Errorf("emulating print media: %w", err)
		}
	}
	return nil
}

// screenshot captures the whole document, below the fold included, as a PNG.
func screenshot(ctx context.Context, t *chromedp.Target) ([]byte, error) {
	m, err := cdp.Call(ctx, t, page.GetLayoutMetrics, cdp.Empty{})
	if err != nil {
		return nil, fmt.Errorf("measuring the page for the screenshot: %w", err)
	}
	size := m.CSSContentSize
	if size == nil {
		return nil, errors.New("measuring the page for the screenshot: Chromium reported no content size")
	}
	res, err := cdp.Call(ctx, t, page.CaptureScreenshot, page.CaptureScreenshotParams{
		Format: page.CaptureScreenshotFormatPng,
		Clip: &page.Viewport{
			Width:  math.Ceil(size.Width),
			Height: math.Min(math.Ceil(size.Height), maxScreenshotHeight),
			Scale:  1,
		},
		CaptureBeyondViewport: new(true),
		FromSurface:           new(true),
	})
	if err != nil {
		return nil, fmt.Errorf("taking the screenshot: %w", err)
	}
	return res.Data, nil
}

// pageInfo is what inspectJS returns.
type pageInfo struct {
	Title        string         `json:"title"`
	Text         string         `json:"text"`
	SVGs         int            `json:"svgs"`
	Counts       map[string]int `json:"counts"`
	ScrollWidth  int            `json:"scrollWidth"`
	ScrollHeight int            `json:"scrollHeight"`
}

// inspectJS returns the expression that reads pageInfo in one round trip. An
// invalid selector throws, and Render fails naming it.
func inspectJS(selectors []string) string {
	if selectors == nil {
		selectors = []string{}
	}
	sels, _ := json.Marshal(selectors) // A []string always marshals.
	return `(() => {
	const counts = {};
	for (const s of ` + string(sels) + `) counts[s] = document.querySelectorAll(s).length;
	const d = document.documentElement;
	return {
		title: document.title,
		text: document.body ? document.body.innerText : "",
		svgs: document.querySelectorAll("svg").length,
		counts: counts,
		scrollWidth: d ? d.scrollWidth : 0,
		scrollHeight: d ? d.scrollHeight : 0,
	};
})()`
}

// recorder collects the console messages and requests of the page from the
// tab's events. chromedp calls listen on the goroutine that reads the tab's
// messages, so it must not block.
type recorder struct {
	self string // the page's own URL, which is not a request of the page

	mu       sync.Mutex
	messages []ConsoleMessage
	requests []Request
	byID     map[network.RequestID]int // index in requests of a request's latest URL
}

func (r *recorder) listen(ev any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		level := ""
		switch ev.Type {
		case runtime.ConsoleAPICalledTypeError, runtime.ConsoleAPICalledTypeAssert:
			level = "error"
		case runtime.ConsoleAPICalledTypeWarning:
			level = "warning"
		default:
			return
		}
		m := ConsoleMessage{Level: level, Source: "console", Text: argsText(ev.Args)}
		if st := ev.StackTrace; st != nil && len(st.CallFrames) > 0 {
			m.URL, m.Line = st.CallFrames[0].URL, st.CallFrames[0].LineNumber
		}
		r.messages = append(r.messages, m)
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		text := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			// The description is the error and its stack; the first
			// line is the message.
			msg, _, _ := strings.Cut(d.Exception.Description, "\n")
			text += " " + msg
		}
		r.messages = append(r.messages, ConsoleMessage{Level: "error", Source: "exception", Text: text, URL: d.URL, Line: d.LineNumber})
	case *log.EventEntryAdded:
		e := ev.Entry
		if e.Level != log.EntryLevelError && e.Level != log.EntryLevelWarning {
			return
		}
		r.messages = append(r.messages, ConsoleMessage{Level: string(e.Level), Source: string(e.Source), Text: e.Text, URL: e.URL, Line: e.LineNumber})
	case *network.EventRequestWillBeSent:
		u := ev.Request.URL
		if u == r.self || strings.HasPrefix(u, "data:") {
			return
		}
		if r.byID == nil {
			r.byID = make(map[network.RequestID]int)
		}
		// A redirect sends the event again with the same id and the new
		// URL: both are requests of the page.
		r.byID[ev.RequestID] = len(r.requests)
		r.requests = append(r.requests, Request{URL: u, Type: string(ev.Type)})
	case *network.EventLoadingFailed:
		if i, ok := r.byID[ev.RequestID]; ok {
			r.requests[i].Error = ev.ErrorText
			r.requests[i].Blocked = string(ev.BlockedReason)
		}
	case *network.EventWebSocketCreated:
		r.requests = append(r.requests, Request{URL: ev.URL, Type: string(network.ResourceTypeWebSocket)})
	}
}

func (r *recorder) result() ([]ConsoleMessage, []Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ConsoleMessage(nil), r.messages...), append([]Request(nil), r.requests...)
}

// argsText renders the arguments of a console call about as the DevTools
// console does: strings as they are, other values by their description.
func argsText(args []*runtime.RemoteObject) string {
	parts := make([]string, 0, len(args))
	for _, a := range args {
		var s string
		switch {
		case a.Type == runtime.RemoteObjectTypeString && json.Unmarshal(a.Value, &s) == nil:
		case a.Description != "":
			s = a.Description
		case a.UnserializableValue != "":
			s = string(a.UnserializableValue)
		case len(a.Value) > 0:
			s = string(a.Value)
		default:
			s = string(a.Type)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// Blank reports whether the PNG image is uniformly one colour: every pixel
// the same, so the variance of the pixel values is zero. That is what a page
// that rendered nothing looks like, whatever its background; a page with any
// text, border or chart on it is not blank.
func Blank(pngData []byte) (bool, error) {
	img, err := png.Decode(bytes.NewReader(pngData))
	if err != nil {
		return false, fmt.Errorf("decoding the screenshot: %w", err)
	}
	b := img.Bounds()
	if b.Empty() {
		return true, nil
	}
	// Chromium's PNGs decode to NRGBA or RGBA: compare their bytes
	// directly, which is much faster than At on a tall page.
	var pix []byte
	var stride, bpp int
	switch m := img.(type) {
	case *image.NRGBA:
		pix, stride, bpp = m.Pix, m.Stride, 4
	case *image.RGBA:
		pix, stride, bpp = m.Pix, m.Stride, 4
	}
	if pix != nil {
		w := b.Dx() * bpp
		first := pix[:bpp]
		for y := 0; y < b.Dy(); y++ {
			row := pix[y*stride : y*stride+w]
			for x := 0; x < w; x += bpp {
				if !bytes.Equal(row[x:x+bpp], first) {
					return false, nil
				}
			}
		}
		return true, nil
	}
	r0, g0, b0, a0 := img.At(b.Min.X, b.Min.Y).RGBA()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if r, g, bl, a := img.At(x, y).RGBA(); r != r0 || g != g0 || bl != b0 || a != a0 {
				return false, nil
			}
		}
	}
	return true, nil
}
