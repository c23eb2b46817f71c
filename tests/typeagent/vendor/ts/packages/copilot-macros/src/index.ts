// Copyright (c) Microsoft Corporation.
// Licensed under the MIT License.

export * from "./contracts.js";
export * from "./deterministicReplay.js";
export * from "./macroDefinition.js";
export * from "./macroManager.js";
export * from "./redaction.js";
