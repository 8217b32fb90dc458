package plproxy_test

import (
	"fmt"

	"github.com/rlcore/rl/sql/plproxy"
)

// The partitions of a router over two shards, as rl-migrate router lays
// them out: partition i on shard i mod 2, the password kept for the user
// mapping.
func ExampleConfig_Layout() {
	cfg := plproxy.Config{
		Shards:     []string{"postgres://rl:secret@db-a:5432/rl?sslmode=require", "postgres://rl:secret@db-b:5432/rl?sslmode=require"},
		Partitions: 4,
	}
	parts, user, _, err := cfg.Layout()
	if err != nil {
		panic(err)
	}
	for i, p := range parts {
		fmt.Printf("p%d: %s\n", i, p)
	}
	fmt.Println("user mapping:", user)
	// Output:
	// p0: dbname=rl host=db-a port=5432 sslmode=require
	// p1: dbname=rl host=db-b port=5432 sslmode=require
	// p2: dbname=rl host=db-a port=5432 sslmode=require
	// p3: dbname=rl host=db-b port=5432 sslmode=require
	// user mapping: rl
}

// Which of 16 partitions holds a key: the router's RUN ON hashtext(key),
// computed in Go (the figures are the server's: SELECT hashtext('user:42')).
func ExamplePartition() {
	for _, key := range []string{"user:42", "api:user:42", "ip:192.0.2.1"} {
		fmt.Printf("%s: hashtext %d, partition %d\n", key, plproxy.HashText(key), plproxy.Partition(key, 16))
	}
	// Output:
	// user:42: hashtext -1579110294, partition 10
	// api:user:42: hashtext 934429568, partition 0
	// ip:192.0.2.1: hashtext 763462762, partition 10
}
