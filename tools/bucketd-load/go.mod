module github.com/bucketd/bucketd/tools/bucketd-load

go 1.26.0
