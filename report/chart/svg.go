package chart

import (
	"bytes"
	"encoding/xml"
	"errors"
	"regexp"
	"strings"
)

// fontFamily names Liberation Sans, with which the text was measured, then
// fonts with the same metrics, then the generic family, so that the text
// fits its place whichever of them the reader has.
const fontFamily = `'Liberation Sans',Arial,Helvetica,sans-serif`

// fontStyle removes what vgsvg writes on every <text>: the family, set once
// on the root instead, and properties at their initial values.
var fontStyle = strings.NewReplacer(
	"font-family:Liberation Sans;", "",
	"font-variant:normal;", "",
	"font-weight:normal;", "",
	"font-style:normal;", "",
)

// anchors sets text-anchor on the text that anchored marked.
var anchors = strings.NewReplacer(
	`>`+anchorMiddle, ` text-anchor="middle">`,
	`>`+anchorEnd, ` text-anchor="end">`,
)

var (
	viewBoxRE = regexp.MustCompile(`\bviewBox="([^"]*)"`)
	// References to ids: vgsvg writes none today; should a later version
	// write a clip path or a gradient, its ids get the chart's prefix too.
	idRefRE = regexp.MustCompile(`\b(id="|href="#|url\(#)([^")]*)`)
)

// inline turns vgsvg's standalone SVG document into an element for HTML:
//
//   - the XML prolog and comment go, as they have no place inside HTML;
//   - the root's width and height in points become width="100%" with the
//     height following from the viewBox, so the chart scales to its
//     container on a screen and on paper;
//   - the font family, which vgsvg writes on every text as the family
//     name of the font file (Liberation Sans), is set once on the root as
//     a stack ending in a generic family;
//   - centred and right-aligned text gets text-anchor (see anchored);
//   - the xlink namespace, which nothing uses, goes;
//   - every id gets the prefix id, and the root the id itself and a
//     <title> for screen readers.
func inline(raw []byte, id, title string) (string, error) {
	start := bytes.Index(raw, []byte("<svg"))
	if start < 0 {
		return "", errors.New("no <svg> element in the output of vgsvg")
	}
	end := bytes.IndexByte(raw[start:], '>')
	if end < 0 {
		return "", errors.New("unterminated <svg> tag in the output of vgsvg")
	}
	tag, body := raw[start:start+end], raw[start+end+1:]
	vb := viewBoxRE.FindSubmatch(tag)
	if vb == nil {
		return "", errors.New("no viewBox in the output of vgsvg")
	}
	b := strings.TrimSpace(anchors.Replace(fontStyle.Replace(string(body))))
	if id == "" {
		id = hashID([]byte(b))
	}
	if strings.Contains(b, `id="`) || strings.Contains(b, `href="#`) || strings.Contains(b, `url(#`) {
		b = idRefRE.ReplaceAllString(b, "${1}"+id+"-${2}")
	}

	var out strings.Builder
	out.Grow(len(b) + 512)
	out.WriteString(`<svg xmlns="http://www.w3.org/2000/svg" id="` + id + `" viewBox="` + string(vb[1]) +
		`" width="100%" style="height:auto;font-family:` + fontFamily + `" role="img"`)
	if title != "" {
		out.WriteString(` aria-labelledby="` + id + `-title"><title id="` + id + `-title">`)
		// Writing to a strings.Builder cannot fail.
		_ = xml.EscapeText(&out, []byte(title))
		out.WriteString(`</title>`)
	} else {
		out.WriteString(`>`)
	}
	out.WriteString("\n")
	out.WriteString(b)
	out.WriteString("\n")
	return out.String(), nil
}
