// Copyright (c) Microsoft Corporation.
// Licensed under the MIT License.

export {
    Logger,
    LoggerSink,
    ChildLogger,
    MultiSinkLogger,
    LogEvent,
    LogEventSeverity,
    CosmosContainerClient,
    CosmosContainerClientFactory,
    CosmosPartitionKeyBuilder,
    CosmosBulkOperation,
    CosmosBulkOperationResult,
    CosmosBulkOperationResponse,
    CosmosPartitionKey,
} from "./logger/logger.js";
export { createMongoDBLoggerSink } from "./logger/mongoLoggerSink.js";
export {
    createCosmosDBLoggerSink,
    CosmosPartitionKeyBuilderFactory,
} from "./logger/cosmosDBLoggerSink.js";
export {
    createDatabaseLoggerSink,
    DatabaseLoggerSinkOptions,
} from "./logger/databaseLoggerSink.js";
export { createDebugLoggerSink } from "./logger/debugLoggerSink.js";
export {
    OtelLoggerSink,
    OtelLoggerSinkOptions,
    createOtelLoggerSink,
} from "./logger/otelLoggerSink.js";
export {
    PromptLogger,
    PromptLoggerOptions,
    createPromptLogger,
} from "./logger/promptLogger.js";

export * from "./stopWatch.js";

export * from "./profiler/profiler.js";
export * from "./profiler/profileLogger.js";
export * from "./profiler/profileReader.js";

export * as otel from "./otel/index.js";
