package faultaction

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"github.com/sloprober/sloprober/internal/safetext"
)

// inGroup starts cmd in a process group of its own, and has its
// cancellation (a timeout, a stop) kill the whole group: a timed-out
// `sh -c "kubectl ... & sleep 300"` would otherwise leave kubectl to act
// minutes later, unrecorded. killed is set to what was killed.
func inGroup(cmd *exec.Cmd, killed *string) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		pgid := cmd.Process.Pid
		names := groupMembers(pgid)
		err := syscall.Kill(-pgid, syscall.SIGKILL)
		if err == nil {
			switch len(names) {
			case 0:
				*killed = fmt.Sprintf("killed its process group %d", pgid)
			case 1:
				*killed = fmt.Sprintf("killed its process group %d (1 process: %s)", pgid, names[0])
			default:
				*killed = fmt.Sprintf("killed its process group %d (%d processes: %s)", pgid, len(names), strings.Join(names, ", "))
			}
		}
		return err
	}
}

// maxMembersShown bounds the names a kill lists.
const maxMembersShown = 16

// groupMembers lists the command names of the processes in process group
// pgid, by /proc (empty where /proc cannot be read): at most
// maxMembersShown, then how many more.
func groupMembers(pgid int) []string {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var names []string
	more := 0
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		comm, group, ok := parseStat(string(stat))
		if !ok || group != pgid {
			continue
		}
		if len(names) == maxMembersShown {
			more++
			continue
		}
		names = append(names, comm)
	}
	if more > 0 {
		names = append(names, fmt.Sprintf("%d more", more))
	}
	return names
}

// parseStat reads the command name and process group of a /proc/PID/stat
// line: "PID (comm) state ppid pgrp ...", where comm may hold spaces and
// parentheses (the last ')' ends it).
func parseStat(s string) (comm string, pgrp int, ok bool) {
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return "", 0, false
	}
	fields := strings.Fields(s[end+1:])
	if len(fields) < 3 {
		return "", 0, false
	}
	pgrp, err := strconv.Atoi(fields[2])
	if err != nil {
		return "", 0, false
	}
	return safetext.Line(s[open+1:end], 64), pgrp, true
}
