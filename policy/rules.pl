% Quarry's access policy: a runnable rendering of SPEC-071's governance rules.
%
% policy/README.md explains, rule by rule, how the spec's text was read. Facts come from the
% gateway's configuration ([policy] agents) and from the facts files the configuration names;
% the request's context (transport, client address, whether the resource is protected) is
% available as request_context(Key, Value) while a decision runs.
%
% The gateway asks one thing: decide(+Request, -Decision, -Why), where Request is one of
%   access(Agent, Server, Resource)     may the agent read Resource of Server?
%   list(Agent, Server)                 may it list Server's resources?
%   protected(Agent, Resource)          may it read Resource, which is protected?
%   configure(Agent)                    may it change credentials and the cache?
%   register(Agent, Kind)               may it add or remove a server? Kind is url (a server
%                                       reached over HTTP, or a removal) or command (a program
%                                       the gateway would run)
% Decision is allow or deny; Why says which rule allowed it and with which facts, or, for each
% rule that could have allowed it, the first condition that does not hold.

:- use_module(library(lists)).
:- use_module(library(iso_ext)).

% Facts a deployment provides. Declared so that a policy without some of them denies instead of
% raising an existence error.
:- dynamic(has_permission/2).
:- dynamic(mcp_server_assignment/2).
:- dynamic(mcp_resource/3).
:- dynamic(resource_belongs_to_tenant/2).
:- dynamic(agent_access_level/2).
:- dynamic(request_context/2).
:- dynamic(registry_allows/1).
:- discontiguous(has_permission/2).
:- discontiguous(mcp_server_assignment/2).
:- discontiguous(mcp_resource/3).
:- discontiguous(resource_belongs_to_tenant/2).
:- discontiguous(agent_access_level/2).

% The rules are dynamic too, only so that decide/3 can read their clauses and say which one
% allowed a request (clause/2 reads dynamic predicates only).
:- dynamic(may_access_mcp/3).
:- dynamic(may_list_resources/2).
:- dynamic(may_configure_mcp/1).
:- dynamic(may_read_protected_resource/2).
:- dynamic(may_change_registry/2).
:- dynamic(authorized_server/2).
:- dynamic(resource_restricted/2).
:- dynamic(required_access_level/3).
:- dynamic(agent_servers/2).
:- dynamic(agent_level/2).
:- dynamic(level_at_least/2).

% --- MCP resource access governance (the spec's rules) ---

% An unrestricted resource: the agent has MCP access, the server is one of its servers, and its
% access level reaches the level the resource requires (normal unless a fact says otherwise).
may_access_mcp(Agent, Server, Resource) :-
    has_permission(Agent, mcp_access),
    authorized_server(Agent, Server),
    \+ resource_restricted(Resource, _),
    required_access_level(Agent, Resource, Required),
    agent_level(Agent, Level),
    level_at_least(Level, Required).

% A restricted (protected) resource: restricted access is needed as well.
may_access_mcp(Agent, Server, Resource) :-
    has_permission(Agent, mcp_access),
    authorized_server(Agent, Server),
    resource_restricted(Resource, restricted),
    has_permission(Agent, mcp_restricted_access).

may_list_resources(Agent, Server) :-
    has_permission(Agent, mcp_access),
    authorized_server(Agent, Server).

may_configure_mcp(Agent) :-
    has_permission(Agent, admin),
    has_permission(Agent, mcp_admin).

may_read_protected_resource(Agent, Resource) :-
    has_permission(Agent, mcp_restricted_access),
    resource_belongs_to_tenant(Agent, Resource).

% The registry tools (add_mcp_server, remove_mcp_server): an agent that may configure the
% gateway, where the configuration lets agents change the registry at all. Its [registry] flags
% are facts: allow_tool_registration = true is registry_allows(tool_registration), and
% allow_tool_commands = true is registry_allows(tool_commands), needed to register a program
% for the gateway to run. A deployment that wants otherwise writes its own facts or rules.
may_change_registry(Agent, url) :-
    may_configure_mcp(Agent),
    registry_allows(tool_registration).
may_change_registry(Agent, command) :-
    may_configure_mcp(Agent),
    registry_allows(tool_registration),
    registry_allows(tool_commands).

% --- Server authorization ---

authorized_server(Agent, Server) :-
    agent_servers(Agent, Servers),
    member(Server, Servers).

authorized_server(Agent, _) :-
    has_permission(Agent, mcp_admin).

% --- Resource restrictions ---

% A resource is restricted when a fact says it is protected, or when the gateway's configuration
% declares it protected (the request's context says so).
resource_restricted(Resource, restricted) :-
    mcp_resource(Resource, protected, true).

resource_restricted(_, restricted) :-
    request_context(protected, true).

required_access_level(_, Resource, Level) :-
    mcp_resource(Resource, required_level, Level).

required_access_level(_, Resource, normal) :-
    \+ mcp_resource(Resource, required_level, _).

% --- Agent server assignments and levels ---

agent_servers(Agent, Servers) :-
    mcp_server_assignment(Agent, Servers).

agent_level(Agent, Level) :-
    agent_access_level(Agent, Level).

agent_level(Agent, normal) :-
    \+ agent_access_level(Agent, _).

level_at_least(Have, Need) :-
    level_rank(Have, H),
    level_rank(Need, N),
    H >= N.

level_rank(normal, 0).
level_rank(elevated, 1).
level_rank(restricted, 2).

% --- The gateway's entry point ---

% decide(+Context, +Request, -Decision, -Why): decide/3 with the request's context (a list of
% Key-Value pairs) as request_context/2 facts while it runs.
decide(Context, Request, Decision, Why) :-
    retractall(request_context(_, _)),
    assert_context(Context),
    decide(Request, Decision, Why),
    retractall(request_context(_, _)).

assert_context([]).
assert_context([K-V|Rest]) :-
    assertz(request_context(K, V)),
    assert_context(Rest).

% allowed(+Requests, -Decisions): the decisions alone (allow, deny or error), one per
% Context-Request pair, without explanations: what the gateway asks for reads and listings.
% The context is asserted again only when it changes from one request to the next.
allowed(Requests, Decisions) :-
    retractall(request_context(_, _)),
    allowed(Requests, none, Decisions),
    retractall(request_context(_, _)).

allowed([], _, []).
allowed([Context-Request|Rest], Current, [Decision|Decisions]) :-
    (   Context == Current
    ->  true
    ;   retractall(request_context(_, _)),
        assert_context(Context)
    ),
    catch(allowed_one(Request, Decision), _, Decision = error),
    allowed(Rest, Context, Decisions).

allowed_one(Request, Decision) :-
    request_goal(Request, Goal),
    (   call_with_inference_limit(Goal, 200000, Result)
    ->  (   Result == inference_limit_exceeded
        ->  Decision = error
        ;   Decision = allow
        )
    ;   Decision = deny
    ),
    !.

% decide(+Request, -Decision, -Why): never throws, never loops for ever. An error or an exhausted
% inference budget inside the rules is Decision = error (the gateway denies, E011).
decide(Request, Decision, Why) :-
    catch(decide_within(Request, Decision, Why), Error, error_decision(Error, Decision, Why)).

decide_within(Request, Decision, Why) :-
    call_with_inference_limit(explain(Request, Found), 200000, Result),
    outcome(Result, Found, Decision, Why).

outcome(inference_limit_exceeded, _, error, inference_limit_exceeded) :- !.
outcome(_, allow(Why), allow, Why) :- !.
outcome(_, deny(Why), deny, Why).

error_decision(Error, error, Error).

request_goal(access(A, S, R), may_access_mcp(A, S, R)).
request_goal(list(A, S), may_list_resources(A, S)).
request_goal(protected(A, R), may_read_protected_resource(A, R)).
request_goal(configure(A), may_configure_mcp(A)).
request_goal(register(A, K), may_change_registry(A, K)).

explain(Request, Found) :-
    request_goal(Request, Goal),
    (   clause_proof(Goal, N, Proof)
    ->  functor(Goal, Name, Arity),
        Found = allow([rule(Name/Arity, N)|Proof])
    ;   findall(Missing, clause_failure(Goal, Missing), Failures),
        Found = deny(Failures)
    ).

% clause_proof(+Goal, -N, -Facts): the N-th clause of Goal's rule holds, with these facts.
clause_proof(Goal, N, Facts) :-
    numbered_clause(Goal, N, Body),
    prove(Body, Facts).

numbered_clause(Goal, N, Body) :-
    functor(Goal, Name, Arity),
    functor(Head, Name, Arity),
    findall(Head-B, clause(Head, B), Clauses),
    nth1(N, Clauses, Goal-Body).

% prove(+Body, -Facts): Body holds; Facts are the facts and tests it used, in order.
prove(true, []) :- !.
prove((A, B), Facts) :- !,
    prove(A, FA),
    prove(B, FB),
    append(FA, FB, Facts).
prove(\+ G, [not(G)]) :- !,
    \+ prove(G, _).
prove(G, Facts) :-
    catch(findall(G-B, clause(G, B), Clauses), error(permission_error(_, _, _), _), fail),
    !,
    (   Clauses = []
    ->  fail
    ;   member(G-B, Clauses),
        (   B == true
        ->  Facts = [G]
        ;   prove(B, Facts)
        )
    ).
prove(G, [G]) :-
    call(G).

% clause_failure(+Goal, -Missing): for each clause of Goal's rule, the first condition that does
% not hold, as clause(N, Condition).
clause_failure(Goal, clause(N, Missing)) :-
    numbered_clause(Goal, N, Body),
    first_failing(Body, Missing).

first_failing((A, B), Missing) :- !,
    (   prove(A, _)
    ->  first_failing(B, Missing)
    ;   Missing = A
    ).
first_failing(G, G) :-
    \+ prove(G, _).

% --- Load-time checks ---

% undefined_call(-Name/Arity): a rule calls a predicate that no rule, fact or library defines.
undefined_call(Name/Arity) :-
    current_predicate(RName/RArity),
    functor(Head, RName, RArity),
    catch(clause(Head, Body), _, fail),
    body_goal(Body, G),
    functor(G, Name, Arity),
    \+ known(G).

body_goal(V, _) :- var(V), !, fail.
body_goal((A, B), G) :- !, ( body_goal(A, G) ; body_goal(B, G) ).
body_goal((A ; B), G) :- !, ( body_goal(A, G) ; body_goal(B, G) ).
body_goal((A -> B), G) :- !, ( body_goal(A, G) ; body_goal(B, G) ).
body_goal(\+ A, G) :- !, body_goal(A, G).
body_goal(true, _) :- !, fail.
body_goal(G, G).

known(G) :-
    functor(G, Name, Arity),
    fact_predicate(Name/Arity),
    !.
known(G) :-
    catch(( clause(G, _) -> true ; fail ), error(permission_error(_, _, _), _), true).

% unsure_call(-Name): a rule calls Name/0, which is not built in. The machine reports every atom
% a rule calls as a predicate, defined or not, so the worker finds out by calling
% undefined_atom(Name) in a throw-away machine.
unsure_call(Name) :-
    current_predicate(RName/RArity),
    functor(Head, RName, RArity),
    catch(clause(Head, Body), _, fail),
    body_goal(Body, Name),
    atom(Name),
    \+ predicate_property(Name, built_in).

% undefined_atom(+Name): calling Name raises an existence error for Name/0 itself.
undefined_atom(Name) :-
    catch(( call_with_inference_limit(Name, 1000, _) -> fail ; fail ),
          Error,
          Error = error(existence_error(procedure, Name/0), _)).

% The facts a policy may leave out entirely (no clause at all is no fact, not an error).
fact_predicate(has_permission/2).
fact_predicate(mcp_server_assignment/2).
fact_predicate(mcp_resource/3).
fact_predicate(resource_belongs_to_tenant/2).
fact_predicate(agent_access_level/2).
fact_predicate(request_context/2).
fact_predicate(registry_allows/1).
