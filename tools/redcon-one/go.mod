module github.com/bucketd/bucketd/tools/redcon-one

go 1.26.0

require github.com/tidwall/redcon v1.6.4

require (
	github.com/tidwall/btree v1.1.0 // indirect
	github.com/tidwall/match v1.1.1 // indirect
)
