package runstore

// Crash lets go of one of s's running runs as the kernel does for a
// process that dies: its lock is released, its lock file left in place,
// its file left saying running.
func Crash(s *Store, id ID) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if f, ok := s.live[id]; ok {
		delete(s.live, id)
		_ = f.Close()
	}
}
