// Copyright (c) Microsoft Corporation.
// Licensed under the MIT License.

// Re-export dispatcher-types so dependents don't need to import them directly.
export type * from "@typeagent/dispatcher-types";
export type {
    DisplayAppendMode,
    DisplayContent,
    MessageContent,
    DisplayType,
    DisplayMessageKind,
    TypeAgentAction,
} from "@typeagent/agent-sdk";
