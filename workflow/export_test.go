package workflow_test

import "github.com/jetflow-dev/jetflow/producer"

var (
	producerErrAlreadyExists = producer.ErrAlreadyExists
	producerErrNotWorkflow   = producer.ErrNotWorkflow
	producerWithID           = producer.WithID
)
