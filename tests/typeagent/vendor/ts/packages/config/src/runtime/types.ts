// Copyright (c) Microsoft Corporation.
// Licensed under the MIT License.

/**
 * Typed runtime configuration surface.
 *
 * This is the API consumers will eventually call instead of reading
 * `process.env.AZURE_OPENAI_*` directly. It is intentionally:
 *
 *  - **Immutable**: every field is `readonly`. A `Config` is built once
 *    by the loader and shared. Mutations require a reload.
 *  - **Discriminated**: `AuthMode` makes "use managed identity" a
 *    first-class state instead of a magic string `"identity"`.
 *  - **Sparse**: every section other than `azureOpenAI` and `extra` is
 *    optional. Consumers that need a section assert its presence at
 *    their boundary; missing sections produce clean error messages.
 *  - **Backed by an escape hatch**: `extra` carries any flat env-var
 *    keys we haven't promoted to typed accessors yet. Phase 3 will
 *    progressively shrink it.
 */

import type { Region } from "./regions.js";

/** Authentication mode for an Azure resource. */
export type AuthMode =
    | { readonly kind: "identity" }
    | { readonly kind: "key"; readonly value: string };

export const IDENTITY: AuthMode = { kind: "identity" };

export function authModeFromString(s: string | undefined): AuthMode {
    if (s === undefined || s === "" || s.toLowerCase() === "identity") {
        return IDENTITY;
    }
    return { kind: "key", value: s };
}

/** Whether a deployment is pay-as-you-go or provisioned-throughput. */
export type DeploymentMode = "PAYG" | "PTU";

/**
 * Wire protocol / request-response shape a deployment endpoint speaks.
 * The pool routing layer is unaffected by this — it picks *which*
 * endpoint to call; `wireApi` then selects the wire-api provider that
 * encodes the request body/headers and decodes the response.
 *
 * - `chat_completions` (default): `/chat/completions` shape TypeAgent
 *   has always spoken. Omitting `wireApi` is exactly equivalent to this
 *   value, so existing configs are byte-for-byte unchanged.
 * - `responses`: `/responses` request/response shape.
 * - `messages`: `/v1/messages` request/response shape.
 */
export type WireApi = "chat_completions" | "responses" | "messages";

/** The wire-api assumed when a deployment/endpoint omits `wireApi`. */
export const DEFAULT_WIRE_API = "chat_completions" as const satisfies WireApi;

/** Narrow an arbitrary string to a known `WireApi`, else `undefined`. */
export function wireApiFromString(s: string | undefined): WireApi | undefined {
    if (s === "chat_completions" || s === "responses" || s === "messages") {
        return s;
    }
    return undefined;
}

/** A single regional endpoint of an Azure OpenAI deployment. */
export interface DeploymentEndpoint {
    /** Full chat/completions/embeddings/images URL. */
    readonly endpoint: string;
    /** Authentication for this endpoint; falls back to `defaultAuth`. */
    readonly auth: AuthMode;
    /**
     * Region this endpoint serves. Auto-derived from the URL hostname
     * when not explicitly set in YAML; required for cooldown / pool
     * accounting.
     */
    readonly region: Region;
    readonly mode: DeploymentMode;
    /** 1 = preferred tier; defaults to 1 for PTU, 2 for PAYG. */
    readonly priority: number;
    /** Declared TPM/RPM capacity (informational; used for routing hints). */
    readonly capacity?: number | undefined;
    /** Declared TPM (for pool routing weight); from legacy POOL override JSON. */
    readonly tpm?: number | undefined;
    /**
     * Wire protocol this endpoint speaks. Absent ⇒ `chat_completions`
     * (see {@link DEFAULT_WIRE_API}); the builder never fabricates this
     * field for a default endpoint, so the round-trip stays lossless and
     * pre-existing configs project back to identical env vars.
     */
    readonly wireApi?: WireApi | undefined;
}

/**
 * A named Azure OpenAI deployment. The `endpoints` list is in
 * priority order (lowest priority value first; ties preserve insertion
 * order) and is the canonical pool used for routing.
 */
export interface Deployment {
    readonly name: string;
    readonly endpoints: readonly DeploymentEndpoint[];
}

export interface AzureOpenAIConfig {
    /** Auth used by deployments / bare endpoints that don't specify one. */
    readonly defaultAuth: AuthMode;

    readonly maxConcurrency: number;
    readonly maxTimeoutMs: number;
    readonly maxRetryAttempts: number;
    /** Whether to send `response_format: json_object` on chat requests. */
    readonly responseFormat: boolean;
    readonly enableModelRequestLogging: boolean;
    readonly maxPromptChars?: number | undefined;

    /**
     * Section-level default capacity applied to every deployment endpoint
     * that doesn't specify its own capacity (either directly on the
     * endpoint or via a per-deployment `defaultCapacity`).
     */
    readonly defaultCapacity?: number | undefined;

    /** Bare `AZURE_OPENAI_ENDPOINT` (legacy default chat target). */
    readonly defaultChat?: DeploymentEndpoint | undefined;
    readonly defaultEmbedding?: DeploymentEndpoint | undefined;
    readonly defaultImage?: DeploymentEndpoint | undefined;
    readonly defaultVideo?: DeploymentEndpoint | undefined;

    readonly deployments: ReadonlyMap<string, Deployment>;
}

export interface OpenAIConfig {
    readonly apiKey: string;
    readonly endpoint?: string | undefined;
    readonly endpointEmbedding?: string | undefined;
    readonly model?: string | undefined;
    readonly modelEmbedding?: string | undefined;
    readonly organization?: string | undefined;
    readonly responseFormat: boolean;
    readonly maxConcurrency: number;
    readonly maxTimeoutMs: number;
    readonly maxRetryAttempts: number;
    /** Local-OpenAI-API-compatible target (Ollama, etc.). */
    readonly local?: OpenAIConfig | undefined;
}

export interface SpeechConfig {
    readonly auth: AuthMode;
    readonly region: Region;
    readonly endpoint?: string | undefined;
}

export interface MapsConfig {
    readonly clientId: string;
    readonly endpoint: string;
}

export interface MicrosoftGraphConfig {
    readonly clientId: string;
    readonly clientSecret: string;
    readonly tenantId: string;
    readonly username?: string | undefined;
    readonly password?: string | undefined;
}

export interface GoogleCalendarConfig {
    readonly clientId: string;
    readonly clientSecret: string;
}

export interface SpotifyConfig {
    readonly clientId: string;
    readonly clientSecret: string;
    readonly port: number;
}

export interface WikipediaConfig {
    readonly clientId: string;
    readonly clientSecret: string;
    readonly endpoint: string;
}

export interface AzureStorageConfig {
    readonly account: string;
    readonly container: string;
}

export interface AwsStorageConfig {
    readonly bucketName: string;
    readonly region: string;
    readonly accessKeyId: string;
    readonly secretAccessKey: string;
}

export interface ElasticConfig {
    readonly apiKey: string;
    readonly uri: string;
}

export interface DatabaseConfig {
    readonly cosmosDbConnectionString?: string | undefined;
    readonly mongoDbConnectionString?: string | undefined;
}

export interface StorageConfig {
    readonly azure?: AzureStorageConfig | undefined;
    readonly aws?: AwsStorageConfig | undefined;
    readonly database?: DatabaseConfig | undefined;
    readonly elastic?: ElasticConfig | undefined;
}

export interface VaultConfig {
    /** Name of the shared Azure Key Vault (e.g. "aisystems"). */
    readonly shared?: string | undefined;
}

/**
 * Azure AI Foundry configuration: Bing-with-Grounding endpoints, agent
 * identifiers, and the Logic-App connection used for HTTP tool dispatch.
 * Mirrors the legacy `AZURE_FOUNDRY_*` / `BING_WITH_GROUNDING_*` /
 * `LOGIC_APP_CONNECTION_ID_*` env vars. All fields optional so partial
 * configurations remain valid.
 */
export interface AzureFoundryConfig {
    /** BING_WITH_GROUNDING_ENDPOINT */
    readonly bingEndpoint?: string | undefined;
    /** BING_WITH_GROUNDING_AGENT_ID */
    readonly bingAgentId?: string | undefined;
    /** BING_WITH_GROUNDING_URL_RESOLUTION_AGENT_ID */
    readonly bingUrlResolutionAgentId?: string | undefined;
    /** BING_WITH_GROUNDING_URL_RESOLUTION_CONNECTION_ID */
    readonly bingUrlResolutionConnectionId?: string | undefined;
    /** AZURE_FOUNDRY_AGENT_ID_VALIDATOR */
    readonly validatorAgentId?: string | undefined;
    /** AZURE_FOUNDRY_AGENT_ID_ALIAS_KEYWORD_EXTRACTOR */
    readonly aliasKeywordExtractorAgentId?: string | undefined;
    /** AZURE_FOUNDRY_AGENT_ID_OPEN_PHRASE_GENERATOR */
    readonly openPhraseGeneratorAgentId?: string | undefined;
    /** LOGIC_APP_CONNECTION_ID_GET_HTTP_ENDPOINT */
    readonly httpEndpointLogicAppConnectionId?: string | undefined;
}

/**
 * Azure AI Search (Foundry IQ) configuration for the browser-less internet
 * lookup: the knowledge base endpoint, backend selection, and retrieval
 * options, plus the settings the setup script uses to provision the web
 * knowledge source and knowledge base. Mirrors the `AZURE_AI_SEARCH_*` env
 * vars. All fields optional so partial configurations remain valid. Auth
 * defaults to identity (DefaultAzureCredential); apiKey/bearerToken override.
 */
export interface AzureAISearchConfig {
    /** AZURE_AI_SEARCH_LOOKUP_MODE ("off" | "api" | "mcp") */
    readonly mode?: string | undefined;
    /** AZURE_AI_SEARCH_ENDPOINT */
    readonly endpoint?: string | undefined;
    /** AZURE_AI_SEARCH_KNOWLEDGE_BASE */
    readonly knowledgeBase?: string | undefined;
    /** AZURE_AI_SEARCH_API_KEY (override; default is identity auth) */
    readonly apiKey?: string | undefined;
    /** AZURE_AI_SEARCH_BEARER_TOKEN (override; default is identity auth) */
    readonly bearerToken?: string | undefined;
    /** AZURE_AI_SEARCH_API_VERSION */
    readonly apiVersion?: string | undefined;
    /** AZURE_AI_SEARCH_OUTPUT_MODE ("answerSynthesis" | "extractedData") */
    readonly outputMode?: string | undefined;
    /** AZURE_AI_SEARCH_REASONING_EFFORT ("minimal" | "low" | "medium") */
    readonly reasoningEffort?: string | undefined;
    /** AZURE_AI_SEARCH_AOAI_ENDPOINT (setup only) */
    readonly aoaiEndpoint?: string | undefined;
    /** AZURE_AI_SEARCH_AOAI_DEPLOYMENT (setup only) */
    readonly aoaiDeployment?: string | undefined;
    /** AZURE_AI_SEARCH_AOAI_MODEL (setup only) */
    readonly aoaiModel?: string | undefined;
    /** AZURE_AI_SEARCH_AOAI_API_KEY (setup only; omit to use managed identity) */
    readonly aoaiApiKey?: string | undefined;
    /** AZURE_AI_SEARCH_WEB_KS_NAME (setup only) */
    readonly webKnowledgeSource?: string | undefined;
    /** AZURE_AI_SEARCH_WEB_KS_DOMAINS (setup only; comma-separated) */
    readonly webKnowledgeSourceDomains?: string | undefined;
}

/**
 * LLM provider modes for the global override switch. Kept as a string
 * literal union (not an import from aiclient) to avoid a circular
 * package dependency — aiclient depends on @typeagent/config, not the
 * other way around.
 */
export type ModelProviderMode = "azure" | "openai" | "ollama" | "copilot";

/**
 * Source of text embeddings, independent of the chat `modelProvider`.
 * - "local": CPU-only transformers.js model bundled with the app.
 * - "openai" / "azure": hosted embedding endpoints.
 * - "none": embeddings disabled; consumers must degrade gracefully.
 */
export type EmbeddingProviderMode = "local" | "openai" | "azure" | "none";

/**
 * Embedding provider configuration. Kept separate from chat provider
 * selection so a deployment can, for example, route chat through Copilot
 * while still producing embeddings from a bundled local model. Endpoint /
 * key for hosted providers reuse the existing `openAI` / `azureOpenAI`
 * embedding entries; this section only selects the provider and (for the
 * local provider) the model and weight cache directory.
 */
export interface EmbeddingConfig {
    /** Which embedding provider to use. */
    readonly provider?: EmbeddingProviderMode | undefined;
    /** Local-provider model id (e.g. `Xenova/all-MiniLM-L6-v2`). */
    readonly model?: string | undefined;
    /** Directory used to cache / pre-stage local model weights. */
    readonly cacheDir?: string | undefined;
}

export interface ReasoningConfig {
    /** Reasoning-loop timeout in milliseconds (0 = disabled). */
    readonly timeoutMs?: number | undefined;
    /** Override the default Copilot reasoning model. */
    readonly copilotModel?: string | undefined;
}

/**
 * GitHub Copilot SDK provider configuration. Used by the translation
 * pipeline when a caller selects `copilot:<model>` (or just `copilot`).
 * Authentication is handled externally by the `copilot` / `gh` CLI —
 * there are no credentials here.
 */
export interface CopilotConfig {
    /** Model id used when `copilot:` is selected with no name. */
    readonly defaultModel?: string | undefined;
    /** Concrete model ids to try when the requested model is unavailable. */
    readonly fallbackModels?: readonly string[] | undefined;
    /** Override the auto-detected `copilot` CLI binary path. */
    readonly cliPath?: string | undefined;
    /**
     * Connect to an already-running Copilot CLI server over TCP instead of
     * spawning a CLI child process. Format: "host:port", "http://host:port",
     * or just "port" (defaults to localhost). Mutually exclusive with
     * `cliPath`; when set it eliminates per-process spawn/startup latency by
     * reusing a warm, external CLI server.
     */
    readonly cliUrl?: string | undefined;
    /** Default reasoning effort to forward for capable models. */
    readonly reasoningEffort?: "low" | "medium" | "high" | "xhigh" | undefined;
    /**
     * Disable infinite/persistent sessions so per-call session setup
     * stays cheap. Defaults to `true` for translation use cases.
     */
    readonly disableInfiniteSessions?: boolean | undefined;
    readonly maxConcurrency?: number | undefined;
    readonly maxTimeoutMs?: number | undefined;
    readonly maxRetryAttempts?: number | undefined;
    readonly enableModelRequestLogging?: boolean | undefined;
}

/** Root typed configuration. */
export interface Config {
    readonly azureOpenAI: AzureOpenAIConfig;
    readonly openAI?: OpenAIConfig | undefined;
    readonly speech?: SpeechConfig | undefined;
    readonly maps?: MapsConfig | undefined;
    readonly msGraph?: MicrosoftGraphConfig | undefined;
    readonly googleCalendar?: GoogleCalendarConfig | undefined;
    readonly spotify?: SpotifyConfig | undefined;
    readonly wikipedia?: WikipediaConfig | undefined;
    readonly storage: StorageConfig;
    readonly vault?: VaultConfig | undefined;
    readonly azureFoundry?: AzureFoundryConfig | undefined;
    readonly azureAISearch?: AzureAISearchConfig | undefined;
    readonly reasoning?: ReasoningConfig | undefined;
    readonly copilot?: CopilotConfig | undefined;
    /**
     * Embedding provider selection, independent of `modelProvider`. When
     * omitted the embedding source is inferred from the configured hosted
     * embedding endpoints (or disabled when none is present).
     */
    readonly embedding?: EmbeddingConfig | undefined;
    /**
     * Active provider mode for model resolution. When set, unprefixed
     * `createChatModel` calls route through this provider's mapping.
     * Bound to `aiclient`'s singleton at startup.
     */
    readonly modelProvider?: ModelProviderMode | undefined;
    /**
     * Untyped passthrough: any flat `KEY=value` pair that wasn't
     * recognized by the typed schema lives here. This is what makes
     * the migration incremental — unmigrated consumers can still find
     * their values via the compatibility shim.
     */
    readonly extra: ReadonlyMap<string, string>;
}
