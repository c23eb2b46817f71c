// Copyright (c) Microsoft Corporation.
// Licensed under the MIT License.

export * from "./dispatcher.js";
export * from "./clientIO.js";
export * from "./displayLogEntry.js";
export * from "./pendingInteraction.js";
export * from "./queue.js";
export * from "./queueStateMirror.js";
export * from "./recordingDirective.js";
export { awaitCommand } from "./awaitCommand.js";
