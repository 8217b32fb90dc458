module github.com/rlcore/rl

go 1.26
