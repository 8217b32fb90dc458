// Package plproxy shards rl over several PostgreSQL databases with PL/Proxy:
// a router database whose rl.rl_allow (and every other public function of
// rl, with the same signature as on one node) sends each call whole to the
// shard that holds its key. Every decision touches one key and one key lives
// on one shard, so a sharded decision is exactly a single-node decision.
//
// The shards run the normal migrations (package sql/migrations). The router
// runs RouterSQL, applied with Apply or `rl-migrate router`, which also
// defines the cluster: the SQL/MED server rl_shards with one option pN per
// partition. The partition count is a power of two and fixed: a key's
// partition is hashtext(key) & (partitions-1), so changing the count moves
// keys. Size it ahead (e.g. 16 partitions on 2 servers, 8 each) and grow by
// pointing partitions at new servers; docs/scaling.md gives the
// procedure.
//
// Partition computes the router's choice in Go (HashText is PostgreSQL's
// hashtext), so that pgstore.NewSharded, which needs row locks on the shard
// itself for the Go/WASM decision path, agrees with the router on where
// every key lives.
package plproxy

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/bits"
	"net/url"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
)

// RouterSQL is the router schema: schema rl with the routing functions,
// the result types, the trigger function rl.enforce_limit and the grants to
// rl_app. It is idempotent and needs the server rl_shards only when called.
//
//go:embed router.sql
var RouterSQL string

// Cluster is the name of the SQL/MED server (the PL/Proxy cluster) the
// router's functions run on.
const Cluster = "rl_shards"

// MaxPartitions bounds the partition count Apply accepts.
const MaxPartitions = 1 << 12

// Config defines a cluster for Apply.
type Config struct {
	// Shards are the URLs of the shard databases (postgres://...), already
	// migrated. They become the partitions' libpq connect strings, without
	// user and password, which go into the user mapping instead: every
	// shard URL must then name the same user and password (or none, for
	// .pgpass or trust).
	Shards []string
	// Partitions is the number of partitions, a power of two at least
	// len(Shards); 0 means the smallest such. Partition i lives on shard
	// i % len(Shards).
	Partitions int
	// Options are further options of the server (PL/Proxy's
	// connection_lifetime, query_timeout, disable_binary, ...).
	Options map[string]string
}

// Layout returns the connect string of each partition and the user and
// password of the user mapping, as Apply would install them.
func (c Config) Layout() (parts []string, user, password string, err error) {
	n := len(c.Shards)
	if n == 0 {
		return nil, "", "", errors.New("plproxy: no shards")
	}
	p := c.Partitions
	if p == 0 {
		p = 1 << bits.Len(uint(n-1))
	}
	if p < n || p > MaxPartitions || p&(p-1) != 0 {
		return nil, "", "", fmt.Errorf("plproxy: %d partitions: want a power of two from %d (the shards) to %d", p, n, MaxPartitions)
	}
	conns := make([]string, n)
	for i, s := range c.Shards {
		cs, u, pw, err := ConnString(s)
		if err != nil {
			return nil, "", "", fmt.Errorf("%w (shard %d)", err, i)
		}
		if i > 0 && (u != user || pw != password) {
			return nil, "", "", fmt.Errorf("plproxy: shard %d names another user or password than shard 0: "+
				"the router connects to every shard with one user mapping", i)
		}
		conns[i], user, password = cs, u, pw
	}
	parts = make([]string, p)
	for i := range parts {
		parts[i] = conns[i%n]
	}
	return parts, user, password, nil
}

// ConnString converts a postgres:// or postgresql:// URL into the libpq
// key=value connect string PL/Proxy needs for a partition (it appends the
// user mapping's options, which a URL cannot take), returning the user and
// password separately. Query parameters become keywords, except those of
// golang-migrate (x-...) and pgxpool (pool_...), which libpq would refuse.
func ConnString(databaseURL string) (connString, user, password string, err error) {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return "", "", "", errors.New("plproxy: cannot parse the shard URL (want postgres://user@host:port/dbname)")
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" && u.Scheme != "pgx5" {
		return "", "", "", fmt.Errorf("plproxy: shard URL scheme %q (want postgres:// or postgresql://)", u.Scheme)
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" {
		return "", "", "", fmt.Errorf("plproxy: no database name in the shard URL %s", u.Redacted())
	}
	kv := map[string]string{"dbname": db}
	if h := u.Hostname(); h != "" {
		kv["host"] = h
	}
	if p := u.Port(); p != "" {
		kv["port"] = p
	}
	user = u.User.Username()
	password, _ = u.User.Password()
	for k, vs := range u.Query() {
		v := vs[len(vs)-1]
		switch {
		case k == "user":
			user = v
		case k == "password":
			password = v
		case strings.HasPrefix(k, "x-") || strings.HasPrefix(k, "pool_"):
			// golang-migrate's and pgxpool's parameters, unknown to libpq
		default:
			kv[k] = v
		}
	}
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(quoteConn(kv[k]))
	}
	return b.String(), user, password, nil
}

// quoteConn quotes a libpq connect-string value when it needs it.
func quoteConn(v string) string {
	if v != "" && !strings.ContainsAny(v, " '\\\t\n") {
		return v
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// Apply installs RouterSQL in the database at routerURL and creates or
// updates the server rl_shards with cfg's partitions, a user mapping for
// PUBLIC with the shards' user and password (replaced when the URLs name
// them, else created only if missing), and USAGE on the server for rl_app
// and rl_admin, in one transaction. It refuses a database holding rl.state (a
// shard, or a single node). Applying again with other shards repoints the
// partitions; with another partition count it moves keys, so it refuses
// unless the server has no partitions yet.
func Apply(ctx context.Context, routerURL string, cfg Config) error {
	parts, user, password, err := cfg.Layout()
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, routerURL)
	if err != nil {
		return fmt.Errorf("plproxy: connect to the router: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var shard bool
		if err := tx.QueryRow(ctx, "SELECT to_regclass('rl.state') IS NOT NULL").Scan(&shard); err != nil {
			return fmt.Errorf("plproxy: %w", err)
		}
		if shard {
			return errors.New("plproxy: this database has the table rl.state: it is a shard or a single node, " +
				"not a router; give the router a database of its own")
		}
		if _, err := tx.Exec(ctx, RouterSQL); err != nil {
			return fmt.Errorf("plproxy: router schema: %w", err)
		}
		var old []string
		err := tx.QueryRow(ctx, "SELECT srvoptions FROM pg_foreign_server WHERE srvname = $1", Cluster).Scan(&old)
		exists := err == nil
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("plproxy: %w", err)
		}
		have := map[string]bool{}
		oldParts := 0
		for _, o := range old {
			k, _, _ := strings.Cut(o, "=")
			have[k] = true
			if len(k) > 1 && k[0] == 'p' && strings.Trim(k[1:], "0123456789") == "" {
				oldParts++
			}
		}
		if oldParts > 0 && oldParts != len(parts) {
			return fmt.Errorf("plproxy: the server %s has %d partitions, not %d: changing the count moves keys "+
				"between partitions (see docs/scaling.md, \"Adding servers\")", Cluster, oldParts, len(parts))
		}
		opts := map[string]string{}
		for k, v := range cfg.Options {
			opts[k] = v
		}
		for i, p := range parts {
			opts[fmt.Sprintf("p%d", i)] = p
		}
		keys := make([]string, 0, len(opts))
		for k := range opts {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var list []string
		for _, k := range keys {
			verb := ""
			if exists {
				verb = "ADD "
				if have[k] {
					verb = "SET "
				}
			}
			list = append(list, verb+pgx.Identifier{k}.Sanitize()+" "+literal(opts[k]))
		}
		stmt := "CREATE SERVER " + Cluster + " FOREIGN DATA WRAPPER plproxy OPTIONS (" + strings.Join(list, ", ") + ")"
		if exists {
			stmt = "ALTER SERVER " + Cluster + " OPTIONS (" + strings.Join(list, ", ") + ")"
		}
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("plproxy: define the server %s: %w", Cluster, err)
		}
		var mapping []string
		if user != "" {
			mapping = append(mapping, "user "+literal(user))
		}
		if password != "" {
			mapping = append(mapping, "password "+literal(password))
		}
		// URLs without a user or password keep a mapping set by hand.
		um := "CREATE USER MAPPING IF NOT EXISTS FOR PUBLIC SERVER " + Cluster
		if len(mapping) > 0 {
			if _, err := tx.Exec(ctx, "DROP USER MAPPING IF EXISTS FOR PUBLIC SERVER "+Cluster); err != nil {
				return fmt.Errorf("plproxy: %w", err)
			}
			um += " OPTIONS (" + strings.Join(mapping, ", ") + ")"
		}
		if _, err := tx.Exec(ctx, um); err != nil {
			return errors.New("plproxy: create the user mapping: " + scrub(err.Error(), password))
		}
		if _, err := tx.Exec(ctx, "GRANT USAGE ON FOREIGN SERVER "+Cluster+" TO rl_app, rl_admin"); err != nil {
			return fmt.Errorf("plproxy: %w", err)
		}
		return nil
	})
}

// literal quotes s as an SQL string literal.
func literal(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

func scrub(s, secret string) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, "xxxxx")
}

// Partition returns the partition of key among n (a power of two) as the
// router's RUN ON hashtext(key) chooses it: hashtext(key) & (n-1).
func Partition(key string, n int) int {
	return int(uint32(HashText(key)) & uint32(n-1))
}

// HashText is PostgreSQL's hashtext(text) for a key in a database with a
// deterministic collation (the default), as computed by a little-endian
// server: Bob Jenkins' lookup3 hash over the key's bytes (hash_bytes in
// src/common/hashfn.c). A test compares it with the server's for many keys.
func HashText(key string) int32 {
	k := key
	n := uint32(len(k))
	a := 0x9e3779b9 + n + 3923095
	b, c := a, a
	for len(k) >= 12 {
		a += le32(k[0:])
		b += le32(k[4:])
		c += le32(k[8:])
		a, b, c = mix(a, b, c)
		k = k[12:]
	}
	switch len(k) {
	case 11:
		c += uint32(k[10]) << 24
		fallthrough
	case 10:
		c += uint32(k[9]) << 16
		fallthrough
	case 9:
		c += uint32(k[8]) << 8
		fallthrough
	case 8:
		b += uint32(k[7]) << 24
		fallthrough
	case 7:
		b += uint32(k[6]) << 16
		fallthrough
	case 6:
		b += uint32(k[5]) << 8
		fallthrough
	case 5:
		b += uint32(k[4])
		fallthrough
	case 4:
		a += uint32(k[3]) << 24
		fallthrough
	case 3:
		a += uint32(k[2]) << 16
		fallthrough
	case 2:
		a += uint32(k[1]) << 8
		fallthrough
	case 1:
		a += uint32(k[0])
	}
	return int32(final(a, b, c))
}

func le32(s string) uint32 {
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

func mix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= c
	a ^= bits.RotateLeft32(c, 4)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 6)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 8)
	b += a
	a -= c
	a ^= bits.RotateLeft32(c, 16)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 19)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 4)
	b += a
	return a, b, c
}

func final(a, b, c uint32) uint32 {
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return c
}
