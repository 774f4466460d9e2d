//go:build !linux

package faultaction

import "os/exec"

// inGroup is Linux's alone: elsewhere a timeout kills the command, not
// what it started.
func inGroup(*exec.Cmd, *string) {}

// leftInGroup is Linux's alone.
func leftInGroup(*exec.Cmd) string { return "" }
