module github.com/meridian-mq/meridian/tests

go 1.26

require github.com/meridian-mq/meridian v0.0.0

require github.com/apache/pulsar-client-go v0.19.0 // indirect

replace github.com/meridian-mq/meridian => ../
