module github.com/lockcluster/lockcluster

go 1.26.8

require github.com/cockroachdb/datadriven v1.0.3

require github.com/pmezard/go-difflib v1.0.0 // indirect
