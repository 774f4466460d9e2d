package capacity

// IdleClients is idleClients, for the tests outside the package.
func (l *Level) IdleClients() bool { return l.idleClients() }
