package prober

// Settling reports whether c would send a request on a connection of its
// own because the server's keep-alive behaviour is unknown and a
// connection has just become idle (see connTracker).
func Settling(c *Client) bool { return c.conns.settling() }
