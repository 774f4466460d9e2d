// Command k8sgen writes the copies of the rules, dashboards, default
// configuration and version that the kustomize base and the Helm chart
// need (see package k8sgen for why they are copies). Run it from deploy/:
//
//	make deploy-generate      # or: cd deploy && go run ./cmd/k8sgen
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/sloprober/sloprober/deploy/internal/k8sgen"
)

func main() {
	root := flag.String("root", "..", "The repository's root.")
	flag.Parse()
	files, err := k8sgen.Files(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8sgen:", err)
		os.Exit(1)
	}
	changed, err := k8sgen.Write(*root, files)
	for _, p := range changed {
		fmt.Println("k8sgen: wrote", p)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8sgen:", err)
		os.Exit(1)
	}
}
