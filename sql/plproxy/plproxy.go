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
//
// Trust: a call through the router has the rights its caller would have on
// one node. The router has its own rl.tenants and the node's trust functions
// (a test keeps them identical); its public functions check every key
// against the router's tenants, pass request times on for the router's
// trusted roles only, and reach the shards as their owner, through the one
// user mapping Apply makes. The shard login (the user of the shard URLs)
// should be an ordinary role on the shards; see Apply.
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

// RouterSQL is the router schema: schema rl with the result types, the
// table rl.tenants, the node's trust functions, the public functions
// (SECURITY DEFINER wrappers over PL/Proxy functions granted to nobody), the
// trigger function rl.enforce_limit and the grants to rl_app and rl_admin.
// It is idempotent and needs the server rl_shards only when called.
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
	// .pgpass or trust). That user is the shard login, the role every call
	// through the router runs as on the shards: make it an ordinary role
	// there, a member of rl_app only (see Apply).
	Shards []string
	// Partitions is the number of partitions, a power of two at least
	// len(Shards); 0 means the smallest such. Partition i lives on shard
	// i % len(Shards).
	Partitions int
	// Options are further options of the server (PL/Proxy's
	// connection_lifetime, query_timeout, disable_binary, ...), except
	// default_user, which Apply refuses: the router connects as the owner
	// of its functions.
	Options map[string]string
	// Owner is the role that owns the router's schema rl and everything in
	// it: its SECURITY DEFINER functions run with this role's rights, and
	// its user mapping is the one that reaches the shards. Empty: the
	// schema's owner when the router exists already, else the role running
	// Apply. PL/Proxy is an untrusted language, so Apply itself runs as a
	// superuser; name an ordinary role here (created beforehand, with no
	// SUPERUSER, CREATEROLE or CREATEDB) so that the router's definer code
	// never runs as one. Apply hands the schema's objects to it and grants
	// it USAGE on the server.
	Owner string
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

// Apply installs RouterSQL in the database at routerURL, creates or updates
// the server rl_shards with cfg's partitions, and maps the owner of the
// router's functions (the role running Apply, the first time) to the shard
// login, in one transaction. It refuses a database holding rl.state (a shard,
// or a single node). Applying again with other shards repoints the
// partitions; with another partition count it moves keys, so it refuses
// unless the server has no partitions yet.
//
// The shard login is the user (and password) of the shard URLs. Only the
// owner's user mapping is made: the router's public functions run as their
// owner (SECURITY DEFINER), check the caller against the router's own
// rl.tenants and trust rules, and pass request times on for trusted callers
// only; nobody is granted USAGE on the server. URLs naming no user keep an
// owner's mapping made by hand. Apply drops the mapping for PUBLIC and the
// grants of USAGE that earlier versions made (every router user then reached
// the shards as the shard login), carrying the PUBLIC mapping's options over
// to the owner when the URLs name no user and the owner has no mapping.
//
// Make the shard login an ordinary role on the shards (a member of rl_app
// only): the shards then decide every call on their own clocks. Granting it
// rl_admin on the shards makes them honour the request times of the router's
// trusted callers (and lets rl_expire run through the router): the router is
// then the trust boundary.
func Apply(ctx context.Context, routerURL string, cfg Config) error {
	parts, user, password, err := cfg.Layout()
	if err != nil {
		return err
	}
	if _, ok := cfg.Options["default_user"]; ok {
		return errors.New("plproxy: the server option default_user is Apply's to leave unset: " +
			"the router's functions connect to the shards as their owner")
	}
	conn, err := pgx.Connect(ctx, routerURL)
	if err != nil {
		return fmt.Errorf("plproxy: connect to the router: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := refuseShard(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, RouterSQL); err != nil {
			return fmt.Errorf("plproxy: router schema: %w", err)
		}
		if err := defineServer(ctx, tx, parts, cfg.Options); err != nil {
			return err
		}
		if err := setOwner(ctx, tx, cfg.Owner); err != nil {
			return err
		}
		return mapOwner(ctx, tx, user, password)
	})
}

// setOwner gives schema rl and every function, table and type in it to
// owner, or (owner empty) to the schema's owner, so that every definer
// function of the router runs as one role, the one mapped to the shards.
func setOwner(ctx context.Context, tx pgx.Tx, owner string) error {
	if owner == "" {
		if err := tx.QueryRow(ctx, "SELECT pg_catalog.pg_get_userbyid(nspowner) FROM pg_catalog.pg_namespace WHERE nspname = 'rl'").
			Scan(&owner); err != nil {
			return fmt.Errorf("plproxy: the owner of schema rl: %w", err)
		}
	}
	role := pgx.Identifier{owner}.Sanitize()
	rows, err := tx.Query(ctx, `
		SELECT 'ALTER SCHEMA rl OWNER TO '
		UNION ALL
		SELECT 'ALTER ROUTINE ' || p.oid::pg_catalog.regprocedure::text || ' OWNER TO '
		  FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'rl'::pg_catalog.regnamespace
		UNION ALL
		SELECT 'ALTER TABLE ' || c.oid::pg_catalog.regclass::text || ' OWNER TO '
		  FROM pg_catalog.pg_class c WHERE c.relnamespace = 'rl'::pg_catalog.regnamespace AND c.relkind IN ('r', 'p')
		UNION ALL
		SELECT 'ALTER TYPE ' || t.oid::pg_catalog.regtype::text || ' OWNER TO '
		  FROM pg_catalog.pg_type t JOIN pg_catalog.pg_class c ON c.oid = t.typrelid
		 WHERE t.typnamespace = 'rl'::pg_catalog.regnamespace AND c.relkind = 'c'`)
	if err != nil {
		return fmt.Errorf("plproxy: list the router's objects: %w", err)
	}
	stmts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("plproxy: list the router's objects: %w", err)
	}
	for _, stmt := range stmts {
		if _, err := tx.Exec(ctx, stmt+role); err != nil {
			return fmt.Errorf("plproxy: give the router to %s: %w", owner, err)
		}
	}
	// PL/Proxy connects as the functions' owner, which needs USAGE on the
	// server (a superuser has it anyway).
	var super bool
	if err := tx.QueryRow(ctx, "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = $1", owner).Scan(&super); err != nil {
		return fmt.Errorf("plproxy: the role %s: %w", owner, err)
	}
	if !super {
		if _, err := tx.Exec(ctx, "GRANT USAGE ON FOREIGN SERVER "+Cluster+" TO "+role); err != nil {
			return fmt.Errorf("plproxy: grant USAGE on the server to %s: %w", owner, err)
		}
	}
	return nil
}

// refuseShard fails when the database holds rl.state: the router schema
// would replace a shard's or a single node's functions.
func refuseShard(ctx context.Context, tx pgx.Tx) error {
	var shard bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass('rl.state') IS NOT NULL").Scan(&shard); err != nil {
		return fmt.Errorf("plproxy: look for rl.state: %w", err)
	}
	if shard {
		return errors.New("plproxy: this database has the table rl.state: it is a shard or a single node, " +
			"not a router; give the router a database of its own")
	}
	return nil
}

// defineServer creates the server rl_shards with one option pN per
// partition and the given options, or repoints an existing one, refusing
// another partition count.
func defineServer(ctx context.Context, tx pgx.Tx, parts []string, options map[string]string) error {
	var old []string
	err := tx.QueryRow(ctx, "SELECT srvoptions FROM pg_foreign_server WHERE srvname = $1", Cluster).Scan(&old)
	exists := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("plproxy: read the server %s: %w", Cluster, err)
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
	for k, v := range options {
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
	return nil
}

// ownerQuery names the owner of the router's functions: the role PL/Proxy
// connects as, since the public functions run with its rights.
const ownerQuery = `SELECT pg_catalog.pg_get_userbyid(p.proowner) FROM pg_catalog.pg_proc p
	WHERE p.oid = 'rl.rl_allow(text, text, bigint, interval, bigint, bigint, text, bigint)'::pg_catalog.regprocedure`

// mapOwner maps the owner of the router's functions to the shard login
// (user and password; both empty: keep the owner's mapping, or carry the
// PUBLIC mapping's options over), then drops the PUBLIC mapping and revokes
// USAGE on the server from PUBLIC, rl_app and rl_admin (earlier versions
// made them). Messages never hold the password.
func mapOwner(ctx context.Context, tx pgx.Tx, user, password string) error {
	var owner string
	if err := tx.QueryRow(ctx, ownerQuery).Scan(&owner); err != nil {
		return fmt.Errorf("plproxy: the owner of the router's functions: %w", err)
	}
	target := pgx.Identifier{owner}.Sanitize()
	opts := map[string]string{}
	if user != "" {
		opts["user"] = user
	}
	if password != "" {
		opts["password"] = password
	}
	var mapped bool
	var public []string
	// The server's owner (the role running Apply, or a superuser) sees
	// every option of these two mappings.
	err := tx.QueryRow(ctx, `SELECT
		EXISTS (SELECT FROM pg_catalog.pg_user_mappings m WHERE m.srvname = $1 AND m.usename = $2 AND m.umuser <> 0),
		(SELECT m.umoptions FROM pg_catalog.pg_user_mappings m WHERE m.srvname = $1 AND m.umuser = 0)`,
		Cluster, owner).Scan(&mapped, &public)
	if err != nil {
		return fmt.Errorf("plproxy: read the user mappings: %w", err)
	}
	if len(opts) == 0 && !mapped {
		for _, o := range public {
			if k, v, ok := strings.Cut(o, "="); ok && (k == "user" || k == "password") {
				opts[k] = v
			}
		}
	}
	secret := opts["password"]
	if len(opts) > 0 || !mapped {
		stmt := "CREATE USER MAPPING FOR " + target + " SERVER " + Cluster
		if len(opts) > 0 {
			var list []string
			for _, k := range []string{"user", "password"} {
				if v, ok := opts[k]; ok {
					list = append(list, k+" "+literal(v))
				}
			}
			stmt += " OPTIONS (" + strings.Join(list, ", ") + ")"
		}
		if _, err := tx.Exec(ctx, "DROP USER MAPPING IF EXISTS FOR "+target+" SERVER "+Cluster); err != nil {
			return fmt.Errorf("plproxy: replace the user mapping of %s: %w", owner, err)
		}
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return errors.New("plproxy: create the user mapping of " + owner + ": " + scrub(err.Error(), secret))
		}
	}
	if _, err := tx.Exec(ctx, "DROP USER MAPPING IF EXISTS FOR PUBLIC SERVER "+Cluster); err != nil {
		return fmt.Errorf("plproxy: drop the user mapping for PUBLIC: %w", err)
	}
	if _, err := tx.Exec(ctx, "REVOKE USAGE ON FOREIGN SERVER "+Cluster+" FROM PUBLIC, rl_app, rl_admin"); err != nil {
		return fmt.Errorf("plproxy: revoke USAGE on the server %s: %w", Cluster, err)
	}
	return nil
}

// literal quotes s as an SQL string literal.
func literal(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// scrub replaces secret in s, so that no message shows a password.
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
