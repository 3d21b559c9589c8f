import type { DescService } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { wellFormedRequests } from "../../core/well-formed-request.ts";

/** A service descriptor with its implementation: what every transport registers. */
export interface ServiceBinding {
  desc: DescService;
  // biome-ignore lint/suspicious/noExplicitAny: implementations are checked where bindings are built (bind()).
  impl: ServiceImpl<any>;
}

/**
 * Pairs a descriptor with its implementation, type-checked. Every transport calls the implementation through
 * here, so the rules every request obeys whatever its protocol (well-formed Unicode strings) are applied here.
 */
export function bind<S extends DescService>(desc: S, impl: ServiceImpl<S>): ServiceBinding {
  return { desc, impl: wellFormedRequests(desc, impl) };
}
