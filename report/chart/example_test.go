package chart_test

import (
	"fmt"
	"strings"

	"github.com/sloprober/sloprober/report/chart"
)

func ExampleChart_SVG() {
	c := &chart.Chart{
		ID:     "goodput",
		Title:  "Goodput against offered load",
		XLabel: "offered load (req/s)",
		YLabel: "goodput (req/s)",
		Series: []chart.Series{
			{Name: "goodput", X: []float64{1, 2, 4, 8, 16}, Y: []float64{1, 2, 3.9, 7.1, 7.4}, Points: true},
		},
		HLines: []chart.Marker{{Value: 7, Label: "target"}},
		VLines: []chart.Marker{{Value: 8, Label: "capacity"}},
		YZero:  true,
	}
	svg, err := c.SVG()
	if err != nil {
		fmt.Println(err)
		return
	}
	// The root element, to inline in HTML as it is.
	fmt.Println(svg[:strings.Index(svg, ">")+1])
	// Output:
	// <svg xmlns="http://www.w3.org/2000/svg" id="goodput" viewBox="0 0 453.54 255.12" width="100%" style="height:auto;font-family:'Liberation Sans',Arial,Helvetica,sans-serif" role="img" aria-labelledby="goodput-title">
}
