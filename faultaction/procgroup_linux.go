package faultaction

import (
	"errors"
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
		what, err := killGroup(pgid, groupMembers(pgid))
		if errors.Is(err, syscall.ESRCH) {
			// The group is gone: the command ended as its
			// deadline came, and exec must not call that a failure.
			return os.ErrProcessDone
		}
		if err == nil {
			*killed = what
		}
		return err
	}
}

// leftInGroup kills what cmd, which has ended, left running in its
// process group (`sh -c "kubectl ... &"` exits at once, its child acting
// on), and says what it killed; "" when nothing was left. A process
// that left the group (setsid) is beyond its reach.
func leftInGroup(cmd *exec.Cmd) string {
	if cmd.Process == nil || cmd.SysProcAttr == nil || !cmd.SysProcAttr.Setpgid {
		return ""
	}
	// While a member lives, its group's id is not given to another
	// process: the group killed is the command's.
	pgid := cmd.Process.Pid
	names := groupMembers(pgid)
	if len(names) == 0 {
		return ""
	}
	what, err := killGroup(pgid, names)
	if err != nil {
		return ""
	}
	return what
}

// killGroup kills process group pgid, whose members were names, and says
// what it killed.
func killGroup(pgid int, names []string) (string, error) {
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil {
		return "", err
	}
	switch len(names) {
	case 0:
		return fmt.Sprintf("killed its process group %d", pgid), nil
	case 1:
		return fmt.Sprintf("killed its process group %d (1 process: %s)", pgid, names[0]), nil
	default:
		return fmt.Sprintf("killed its process group %d (%d processes: %s)", pgid, len(names), strings.Join(names, ", ")), nil
	}
}

// maxMembersShown bounds the names a kill lists.
const maxMembersShown = 16

// groupMembers lists the command names of the live processes in process
// group pgid, by /proc (empty where /proc cannot be read): at most
// maxMembersShown, then how many more. A zombie (killed, not yet reaped
// by its parent or init) is not listed: it can do nothing more.
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
		comm, state, group, ok := parseStat(string(stat))
		if !ok || group != pgid || state == "Z" {
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

// parseStat reads the command name, state and process group of a
// /proc/PID/stat line: "PID (comm) state ppid pgrp ...", where comm may
// hold spaces and parentheses (the last ')' ends it).
func parseStat(s string) (comm, state string, pgrp int, ok bool) {
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return "", "", 0, false
	}
	fields := strings.Fields(s[end+1:])
	if len(fields) < 3 {
		return "", "", 0, false
	}
	pgrp, err := strconv.Atoi(fields[2])
	if err != nil {
		return "", "", 0, false
	}
	return safetext.Line(s[open+1:end], 64), fields[0], pgrp, true
}
