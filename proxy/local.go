package proxy

import (
	"bytes"
	"crypto/subtle"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Connection commands: the proxy answers them itself, as a standalone
// Redis would, for the client's connection to the proxy.

// wrongArity is Redis's arity error.
func wrongArity(name string) string {
	return "ERR wrong number of arguments for '" + name + "' command"
}

func (c *conn) ping(args [][]byte) {
	switch len(args) {
	case 1:
		c.out = appendStatus(c.out, "PONG")
	case 2:
		c.out = appendBulk(c.out, string(args[1]))
	default:
		c.out = appendErr(c.out, wrongArity("ping"))
	}
}

func (c *conn) echo(args [][]byte) {
	if len(args) != 2 {
		c.out = appendErr(c.out, wrongArity("echo"))
		return
	}
	c.out = appendBulk(c.out, string(args[1]))
}

func (c *conn) quitCmd([][]byte) {
	c.out = appendOK(c.out)
	c.quit = true
}

func (c *conn) selectDB(args [][]byte) {
	if len(args) != 2 {
		c.out = appendErr(c.out, wrongArity("select"))
		return
	}
	n, ok := string2ll(args[1])
	switch {
	case !ok:
		c.out = appendErr(c.out, "ERR value is not an integer or out of range")
	case n != 0:
		c.out = appendErr(c.out, "ERR DB index is out of range")
	default:
		c.out = appendOK(c.out)
	}
}

func (c *conn) role([][]byte) {
	c.out = appendArray(c.out, 3)
	c.out = appendBulk(c.out, "master")
	c.out = appendInt(c.out, 0)
	c.out = appendArray(c.out, 0)
}

// checkAuth checks a username (empty: "default") and password against
// the proxy's Password.
func (c *conn) checkAuth(user, pass []byte) bool {
	if len(user) != 0 && string(user) != "default" {
		return false
	}
	if c.s.cfg.Password == "" {
		return true // the default user without a password takes any
	}
	return subtle.ConstantTimeCompare(pass, []byte(c.s.cfg.Password)) == 1
}

const wrongPass = "WRONGPASS invalid username-password pair or user is disabled."

func (c *conn) auth(args [][]byte) {
	switch {
	case len(args) < 2:
		c.out = appendErr(c.out, wrongArity("auth"))
		return
	case len(args) > 3:
		c.out = appendErr(c.out, "ERR syntax error")
		return
	case len(args) == 2 && c.s.cfg.Password == "":
		c.out = appendErr(c.out, "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
		return
	}
	user, pass := []byte(nil), args[len(args)-1]
	if len(args) == 3 {
		user = args[1]
	}
	if !c.checkAuth(user, pass) {
		c.out = appendErr(c.out, wrongPass)
		return
	}
	c.authed = true
	c.out = appendOK(c.out)
}

// hello: HELLO [protover [AUTH username password] [SETNAME clientname]].
func (c *conn) hello(args [][]byte) {
	ver := c.proto
	next := 1
	if len(args) >= 2 {
		v, ok := string2ll(args[1])
		if !ok {
			c.out = appendErr(c.out, "ERR Protocol version is not an integer or out of range")
			return
		}
		if v < 2 || v > 3 {
			c.out = appendErr(c.out, "NOPROTO unsupported protocol version")
			return
		}
		ver = int(v)
		next = 2
	}
	var user, pass, name []byte
	var hasAuth, hasName bool
	for j := next; j < len(args); j++ {
		more := len(args) - 1 - j
		switch opt := args[j]; {
		case bytes.EqualFold(opt, []byte("auth")) && more >= 2:
			user, pass, hasAuth = args[j+1], args[j+2], true
			j += 2
		case bytes.EqualFold(opt, []byte("setname")) && more >= 1:
			name, hasName = args[j+1], true
			j++
		default:
			c.out = appendErr(c.out, fmt.Sprintf("ERR Syntax error in HELLO option '%.128s'", opt))
			return
		}
	}
	if hasAuth {
		if !c.checkAuth(user, pass) {
			c.out = appendErr(c.out, wrongPass)
			return
		}
		c.authed = true
	}
	if !c.authed {
		c.out = appendErr(c.out, "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
		return
	}
	if hasName {
		if !validClientName(name) {
			c.out = appendErr(c.out, "ERR Client names cannot contain spaces, newlines or special characters.")
			return
		}
		c.setName(string(name))
	}
	c.setProto(ver)
	c.out = appendMap(c.out, 7, c.proto)
	c.out = appendBulk(c.out, "server")
	c.out = appendBulk(c.out, "redis")
	c.out = appendBulk(c.out, "version")
	c.out = appendBulk(c.out, c.s.version)
	c.out = appendBulk(c.out, "proto")
	c.out = appendInt(c.out, int64(c.proto))
	c.out = appendBulk(c.out, "id")
	c.out = appendInt(c.out, c.id)
	c.out = appendBulk(c.out, "mode")
	c.out = appendBulk(c.out, "standalone")
	c.out = appendBulk(c.out, "role")
	c.out = appendBulk(c.out, "master")
	c.out = appendBulk(c.out, "modules")
	c.out = appendArray(c.out, 0)
}

// setProto switches the connection's protocol; the pass-through follows
// it (the upstream client of the same protocol).
func (c *conn) setProto(v int) {
	if v != c.proto {
		c.tx.release(c) // a dedicated upstream connection speaks the old one
	}
	c.proto = v
	c.meta.Lock()
	c.meta.proto = v
	c.meta.Unlock()
}

func (c *conn) setName(name string) {
	c.meta.Lock()
	c.meta.name = name
	c.meta.Unlock()
}

// validClientName: printable ASCII without spaces, as Redis requires.
func validClientName(b []byte) bool {
	for _, ch := range b {
		if ch < '!' || ch > '~' {
			return false
		}
	}
	return true
}

// reset: RESET ends a transaction, forgets WATCHes, the name and the
// protocol, and authentication when a password is set.
func (c *conn) reset(args [][]byte) {
	if len(args) != 1 {
		c.out = appendErr(c.out, wrongArity("reset"))
		return
	}
	c.tx.release(c)
	c.setProto(2)
	c.setName("")
	c.authed = c.s.cfg.Password == ""
	c.out = appendStatus(c.out, "RESET")
}

// client: CLIENT ID|GETNAME|SETNAME|INFO|LIST|SETINFO|UNBLOCK|NO-EVICT|NO-TOUCH|HELP.
func (c *conn) client(args [][]byte) {
	if len(args) < 2 {
		c.out = appendErr(c.out, wrongArity("client"))
		return
	}
	var nb [32]byte
	sub := string(lower(nb[:0], args[1]))
	switch {
	case sub == "id" && len(args) == 2:
		c.out = appendInt(c.out, c.id)
	case sub == "getname" && len(args) == 2:
		c.meta.Lock()
		name := c.meta.name
		c.meta.Unlock()
		if name == "" {
			c.out = appendNull(c.out, c.proto)
		} else {
			c.out = appendBulk(c.out, name)
		}
	case sub == "setname" && len(args) == 3:
		if !validClientName(args[2]) {
			c.out = appendErr(c.out, "ERR Client names cannot contain spaces, newlines or special characters.")
			return
		}
		c.setName(string(args[2]))
		c.out = appendOK(c.out)
	case sub == "info" && len(args) == 2:
		c.out = appendText(c.out, c.describe(c.s.cfg.Clock.Now())+"\n", c.proto)
	case sub == "list":
		c.out = appendText(c.out, c.s.clientList(), c.proto)
	case sub == "setinfo" && len(args) == 4:
		var ab [32]byte
		val := string(args[3])
		switch string(lower(ab[:0], args[2])) {
		case "lib-name":
			if strings.ContainsAny(val, " \r\n") {
				c.out = appendErr(c.out, "ERR lib-name cannot contain spaces, newlines or special characters.")
				return
			}
			c.meta.Lock()
			c.meta.libName = val
			c.meta.Unlock()
		case "lib-ver":
			c.meta.Lock()
			c.meta.libVer = val
			c.meta.Unlock()
		default:
			c.out = appendErr(c.out, fmt.Sprintf("ERR Unrecognized option '%.128s'", args[2]))
			return
		}
		c.out = appendOK(c.out)
	case sub == "unblock" && (len(args) == 3 || len(args) == 4):
		c.unblockClient(args)
	case (sub == "no-evict" || sub == "no-touch") && len(args) == 3:
		c.out = appendOK(c.out)
	case sub == "help":
		lines := []string{
			"CLIENT <subcommand> (hotcount proxy). Subcommands are:",
			"ID", "GETNAME", "SETNAME <name>", "INFO", "LIST", "SETINFO <LIB-NAME|LIB-VER> <value>",
			"NO-EVICT (ON|OFF)", "NO-TOUCH (ON|OFF)", "UNBLOCK <clientid> [TIMEOUT|ERROR]", "HELP",
		}
		c.out = appendArray(c.out, len(lines))
		for _, l := range lines {
			c.out = appendStatus(c.out, l)
		}
	case sub == "tracking" || sub == "caching" || sub == "getredir" || sub == "trackinginfo":
		c.s.stats.refused.Add(1)
		c.out = appendErr(c.out, "ERR client-side caching (CLIENT "+strings.ToUpper(sub)+") is not supported by the hotcount proxy")
	default:
		c.s.stats.refused.Add(1)
		c.out = appendErr(c.out, fmt.Sprintf("ERR CLIENT %.64s is not supported by the hotcount proxy (or wrong number of arguments); try CLIENT HELP", strings.ToUpper(sub)))
	}
}

// describe is the connection's CLIENT INFO line.
func (c *conn) describe(now time.Time) string {
	c.meta.Lock()
	name, lib, ver, last, proto := c.meta.name, c.meta.libName, c.meta.libVer, c.meta.lastCmd, c.meta.proto
	c.meta.Unlock()
	idle := time.Duration(0)
	if la := c.lastActive.Load(); la != 0 {
		idle = now.Sub(time.Unix(0, la))
	}
	return fmt.Sprintf("id=%d addr=%s laddr=%s name=%s age=%d idle=%d flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 cmd=%s user=default lib-name=%s lib-ver=%s resp=%d",
		c.id, c.addr, c.laddr, name, int64(now.Sub(c.created).Seconds()), int64(idle.Seconds()), last, lib, ver, proto)
}

// clientList is CLIENT LIST: one line per connection, by id.
func (s *Server) clientList() string {
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	sort.Slice(conns, func(i, j int) bool { return conns[i].id < conns[j].id })
	var b strings.Builder
	for _, c := range conns {
		b.WriteString(c.describe(now))
		b.WriteByte('\n')
	}
	return b.String()
}
