// Package readertest picks the prober's reader for a test run: `make test`
// runs the packages that read streams once with each reader
// (--prober.reader): first with the default (prober.DefaultReader), the
// second time with SLOPROBER_TEST_READER=std.
package readertest

import (
	"cmp"
	"fmt"
	"os"

	"github.com/sloprober/sloprober/prober"
)

// Env is the variable that names the reader.
const Env = "SLOPROBER_TEST_READER"

// Reader returns the reader SLOPROBER_TEST_READER names, the prober's
// default when it is not set. A name the prober does not know, or fast where it cannot run,
// panics: a test run must not quietly test another reader than asked.
func Reader() prober.Reader {
	r, err := prober.ParseReader(cmp.Or(os.Getenv(Env), string(prober.DefaultReader)))
	if err != nil {
		panic(fmt.Sprintf("%s: %v", Env, err))
	}
	return r
}
