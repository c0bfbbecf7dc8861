use kafka_protocol::messages::{CreateAclsRequest, DeleteAclsRequest};

use super::*;

fn binding(
    resource_type: ResourceType,
    name: &str,
    pattern_type: PatternType,
    principal: &str,
    operation: AclOperation,
    permission_type: AclPermissionType,
) -> AclBinding {
    AclBinding::from_any_host(resource_type, name, pattern_type, principal, operation, permission_type)
}

fn topic(name: &str, pattern_type: PatternType, principal: &str) -> AclBinding {
    binding(
        ResourceType::Topic,
        name,
        pattern_type,
        principal,
        AclOperation::Read,
        AclPermissionType::Allow,
    )
}

fn sample() -> Vec<AclBinding> {
    vec![
        topic("orders", PatternType::Literal, "User:alice"),
        topic("*", PatternType::Literal, "User:bob"),
        topic("ord", PatternType::Prefixed, "User:carol"),
        topic("payments", PatternType::Literal, "User:alice"),
        binding(
            ResourceType::Group,
            "orders",
            PatternType::Literal,
            "User:alice",
            AclOperation::Read,
            AclPermissionType::Deny,
        ),
        binding(
            ResourceType::Cluster,
            CLUSTER_RESOURCE_NAME,
            PatternType::Literal,
            "User:admin",
            AclOperation::Alter,
            AclPermissionType::Allow,
        ),
    ]
}

fn matching(filter: &AclBindingFilter) -> Vec<usize> {
    sample()
        .iter()
        .enumerate()
        .filter(|(_, b)| filter.matches(b))
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn filters_match_as_kafkas() {
    assert_eq!(matching(&AclBindingFilter::any()), [0, 1, 2, 3, 4, 5]);
    let topics = AclBindingFilter {
        resource_type: ResourceType::Topic,
        ..AclBindingFilter::any()
    };
    assert_eq!(matching(&topics), [0, 1, 2, 3]);
    // ANY pattern type with a name: exact names, any pattern type.
    let named = AclBindingFilter {
        resource_name: Some("orders".into()),
        ..AclBindingFilter::any()
    };
    assert_eq!(matching(&named), [0, 4]);
    // MATCH: what applies to the topic "orders" — its literal, the
    // wildcard, and the prefix "ord".
    let applies = AclBindingFilter {
        resource_type: ResourceType::Topic,
        resource_name: Some("orders".into()),
        pattern_type: PatternType::Match,
        ..AclBindingFilter::any()
    };
    assert_eq!(matching(&applies), [0, 1, 2]);
    // MATCH without a name: everything.
    let match_all = AclBindingFilter {
        pattern_type: PatternType::Match,
        ..AclBindingFilter::any()
    };
    assert_eq!(matching(&match_all), [0, 1, 2, 3, 4, 5]);
    // A pattern type selects only that type; the name is then exact.
    let prefixed = AclBindingFilter {
        pattern_type: PatternType::Prefixed,
        ..AclBindingFilter::any()
    };
    assert_eq!(matching(&prefixed), [2]);
    let prefixed_orders = AclBindingFilter {
        resource_name: Some("orders".into()),
        pattern_type: PatternType::Prefixed,
        ..AclBindingFilter::any()
    };
    assert!(matching(&prefixed_orders).is_empty());
    // Entry fields.
    let alice = AclBindingFilter {
        principal: Some("User:alice".into()),
        ..AclBindingFilter::any()
    };
    assert_eq!(matching(&alice), [0, 3, 4]);
    let deny = AclBindingFilter {
        permission_type: AclPermissionType::Deny,
        ..AclBindingFilter::any()
    };
    assert_eq!(matching(&deny), [4]);
    let alter = AclBindingFilter {
        operation: AclOperation::Alter,
        ..AclBindingFilter::any()
    };
    assert_eq!(matching(&alter), [5]);
    let other_host = AclBindingFilter {
        host: Some("10.0.0.1".into()),
        ..AclBindingFilter::any()
    };
    assert!(matching(&other_host).is_empty());
    // An exact filter matches its binding only.
    for (i, b) in sample().iter().enumerate() {
        assert_eq!(matching(&AclBindingFilter::exact(b)), [i]);
    }
}

#[test]
fn wire_codes_and_names_round_trip() {
    for &t in ResourceType::VALUES {
        assert_eq!(ResourceType::from_code(t.code()), Some(t));
        assert_eq!(t.name().parse::<ResourceType>(), Ok(t));
    }
    assert_eq!(ResourceType::from_code(0), None);
    assert_eq!(AclOperation::from_code(16), None);
    assert_eq!("transactional-id".parse(), Ok(ResourceType::TransactionalId));
    assert_eq!("prefixed".parse(), Ok(PatternType::Prefixed));
    assert_eq!("Describe_Configs".parse(), Ok(AclOperation::DescribeConfigs));
    assert!("nope".parse::<AclPermissionType>().unwrap_err().contains("ALLOW"));
    assert_eq!(ResourceType::Topic.code(), 2);
    assert_eq!(PatternType::Literal.code(), 3);
    assert_eq!(AclOperation::IdempotentWrite.code(), 12);
    assert_eq!(AclPermissionType::Allow.code(), 3);
    for b in sample() {
        assert_eq!(AclBinding::decode_key(&b.encode_key()), Some(b.clone()));
        assert_eq!(AclBinding::from_creation(&b.to_creation()), Ok(b.clone()));
        let filter = AclBindingFilter::from_delete_filter(&b.to_delete_filter()).unwrap();
        assert_eq!(filter, AclBindingFilter::exact(&b));
    }
    let filter = AclBindingFilter {
        resource_type: ResourceType::Group,
        pattern_type: PatternType::Match,
        principal: Some("User:x".into()),
        ..AclBindingFilter::any()
    };
    assert_eq!(
        AclBindingFilter::from_describe_request(&filter.to_describe_request()),
        Ok(filter)
    );
    // A truncated or foreign key does not decode.
    let key = sample()[0].encode_key();
    assert_eq!(AclBinding::decode_key(&key[..key.len() - 1]), None);
    assert_eq!(AclBinding::decode_key(&[key.as_slice(), b"x"].concat()), None);
}

fn cluster_mirror(name: &str, pattern_type: PatternType, operation: AclOperation) -> AclBinding {
    binding(
        ResourceType::ClusterMirror,
        name,
        pattern_type,
        "User:ops",
        operation,
        AclPermissionType::Allow,
    )
}

#[test]
fn cluster_mirror_bindings_are_selected_only_by_filters_naming_the_type() {
    let mirrors = [
        cluster_mirror("dr", PatternType::Literal, AclOperation::Describe),
        cluster_mirror("*", PatternType::Literal, AclOperation::Alter),
        cluster_mirror("prod-", PatternType::Prefixed, AclOperation::Create),
    ];
    let all: Vec<AclBinding> = sample().into_iter().chain(mirrors.iter().cloned()).collect();
    let matched =
        |filter: &AclBindingFilter| -> Vec<&AclBinding> { all.iter().filter(|b| filter.matches(b)).collect() };
    // ANY, with or without MATCH, a name or entry fields: never them.
    for filter in [
        AclBindingFilter::any(),
        AclBindingFilter {
            pattern_type: PatternType::Match,
            resource_name: Some("dr".into()),
            ..AclBindingFilter::any()
        },
        AclBindingFilter {
            principal: Some("User:ops".into()),
            ..AclBindingFilter::any()
        },
    ] {
        assert!(
            matched(&filter)
                .iter()
                .all(|b| b.resource_type != ResourceType::ClusterMirror),
            "{filter:?}"
        );
    }
    assert_eq!(matched(&AclBindingFilter::any()).len(), sample().len());
    let of_type = AclBindingFilter {
        resource_type: ResourceType::ClusterMirror,
        ..AclBindingFilter::any()
    };
    assert_eq!(matched(&of_type), mirrors.iter().collect::<Vec<_>>());
    // MATCH on the type: what applies to the mirror "prod-eu".
    let applies = AclBindingFilter {
        resource_name: Some("prod-eu".into()),
        pattern_type: PatternType::Match,
        ..of_type.clone()
    };
    assert_eq!(matched(&applies), [&mirrors[1], &mirrors[2]]);
    assert_eq!(ResourceType::ClusterMirror.code(), 8);
    for name in ["CLUSTER_MIRROR", "cluster-mirror", "ClusterMirror", "clustermirror"] {
        assert_eq!(name.parse(), Ok(ResourceType::ClusterMirror), "{name}");
    }
    assert_eq!("TransactionalId".parse(), Ok(ResourceType::TransactionalId));
    assert!("cluster mirror".parse::<ResourceType>().is_err());
}

#[test]
fn kafka_clients_see_no_cluster_mirror_code_and_change_them_only_under_an_authorizer() {
    let dir = tempfile::tempdir().unwrap();
    let store = AclStore::open(dir.path().join("acls")).unwrap();
    let mirror_acl = cluster_mirror("dr", PatternType::Literal, AclOperation::Describe);
    let topic_acl = topic("orders", PatternType::Literal, "User:alice");
    let creations =
        CreateAclsRequest::default().with_creations(vec![mirror_acl.to_creation(), topic_acl.to_creation()]);
    // Without an authorizer: the topic ACL is created, the ClusterMirror one refused.
    let response = create_acls_response(&store, &creations, false);
    let outcome: Vec<(i16, Option<&str>)> = response
        .results
        .iter()
        .map(|r| (r.error_code, r.error_message.as_deref().filter(|m| !m.is_empty())))
        .collect();
    assert_eq!(
        outcome,
        [
            (codes::CLUSTER_AUTHORIZATION_FAILED, Some(LOCAL_ACLS_NEED_AUTHORIZER)),
            (codes::NONE, None)
        ]
    );
    assert_eq!(store.len(), 1);
    // With one (the request passed ALTER on the cluster): both.
    let response = create_acls_response(&store, &creations, true);
    assert!(response.results.iter().all(|r| r.error_code == codes::NONE));
    assert_eq!(store.len(), 2);

    // DescribeAcls ANY: only codes Kafka knows; asked by type: ours.
    let described = describe_acls_response(&store, &AclBindingFilter::any().to_describe_request());
    let types: Vec<i8> = described.resources.iter().map(|r| r.resource_type).collect();
    assert_eq!(types, [ResourceType::Topic.code()]);
    let of_type = AclBindingFilter {
        resource_type: ResourceType::ClusterMirror,
        ..AclBindingFilter::any()
    };
    let described = describe_acls_response(&store, &of_type.to_describe_request());
    assert_eq!(
        AclBinding::from_describe_response(&described).0,
        std::slice::from_ref(&mirror_acl)
    );

    // DeleteAcls ANY leaves it; by type, only under an authorizer.
    let any = DeleteAclsRequest::default().with_filters(vec![AclBindingFilter::any().to_delete_filter()]);
    let response = delete_acls_response(&store, &any, true);
    assert_eq!(response.filter_results[0].matching_acls.len(), 1);
    assert_eq!(store.describe(&of_type), std::slice::from_ref(&mirror_acl));
    let by_type = DeleteAclsRequest::default().with_filters(vec![of_type.to_delete_filter()]);
    let response = delete_acls_response(&store, &by_type, false);
    assert_eq!(
        (
            response.filter_results[0].error_code,
            response.filter_results[0].error_message.as_deref()
        ),
        (codes::CLUSTER_AUTHORIZATION_FAILED, Some(LOCAL_ACLS_NEED_AUTHORIZER))
    );
    assert_eq!(store.len(), 1);
    let response = delete_acls_response(&store, &by_type, true);
    assert_eq!(response.filter_results[0].matching_acls.len(), 1);
    assert!(store.is_empty());
}

#[test]
fn creations_are_validated_as_kafka_does() {
    let ok = topic("orders", PatternType::Literal, "User:alice");
    assert_eq!(ok.validate(), Ok(()));
    let bad = [
        AclBinding {
            resource_type: ResourceType::Any,
            ..ok.clone()
        },
        AclBinding {
            pattern_type: PatternType::Match,
            ..ok.clone()
        },
        AclBinding {
            pattern_type: PatternType::Any,
            ..ok.clone()
        },
        AclBinding {
            operation: AclOperation::Any,
            ..ok.clone()
        },
        AclBinding {
            permission_type: AclPermissionType::Any,
            ..ok.clone()
        },
        AclBinding {
            resource_name: String::new(),
            ..ok.clone()
        },
        AclBinding {
            principal: "alice".into(),
            ..ok.clone()
        },
        AclBinding {
            resource_type: ResourceType::Cluster,
            resource_name: "my-cluster".into(),
            ..ok.clone()
        },
    ];
    for b in bad {
        assert!(b.validate().is_err(), "{b}");
    }
    let unknown = ok.to_creation().with_operation(0);
    assert!(AclBinding::from_creation(&unknown).unwrap_err().contains("operation"));
}

#[test]
fn the_store_persists_creations_and_deletions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("__ringmirror").join("acls");
    let all = sample();
    {
        let store = AclStore::open(&path).unwrap();
        assert!(store.is_empty());
        assert_eq!(store.create(&all).unwrap(), all.len());
        // Creating again adds nothing.
        assert_eq!(store.create(&all[..2]).unwrap(), 0);
        let alice = AclBindingFilter {
            principal: Some("User:alice".into()),
            ..AclBindingFilter::any()
        };
        let topics = AclBindingFilter {
            resource_type: ResourceType::Topic,
            ..AclBindingFilter::any()
        };
        // Per filter, everything it matched, a binding under each filter.
        let deleted = store.delete(&[alice, topics]).unwrap();
        assert_eq!(deleted[0].len(), 3);
        assert_eq!(deleted[1].len(), 4);
        assert_eq!(store.len(), 1);
        // Deleting what is gone matches nothing.
        assert_eq!(
            store.delete(&[AclBindingFilter::exact(&all[0])]).unwrap(),
            vec![Vec::new()]
        );
    }
    assert!(path.is_dir(), "the log is at <data dir>/__ringmirror/acls");
    let store = AclStore::open(&path).unwrap();
    assert_eq!(store.describe(&AclBindingFilter::any()), [all[5].clone()]);
    // Re-created after its tombstone, it is back after a reopen too.
    store.create(&all[..1]).unwrap();
    drop(store);
    let store = AclStore::open(&path).unwrap();
    assert_eq!(
        store.describe(&AclBindingFilter::any()),
        [all[0].clone(), all[5].clone()]
    );
}

#[test]
fn the_store_survives_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("acls");
    let store = AclStore::open(&path).unwrap();
    let b = |i: usize| topic(&format!("t{i}-{}", "x".repeat(200)), PatternType::Literal, "User:u");
    // Enough churn to pass the compaction threshold several times.
    for round in 0..40 {
        let batch: Vec<AclBinding> = (0..100).map(|i| b(round * 100 + i)).collect();
        store.create(&batch).unwrap();
        let filters: Vec<AclBindingFilter> = batch[1..].iter().map(AclBindingFilter::exact).collect();
        store.delete(&filters).unwrap();
    }
    assert_eq!(store.len(), 40);
    drop(store);
    let store = AclStore::open(&path).unwrap();
    let expected: Vec<AclBinding> = (0..40)
        .map(|round| b(round * 100))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(store.describe(&AclBindingFilter::any()), expected);
}

#[test]
fn answers_follow_kafka() {
    let dir = tempfile::tempdir().unwrap();
    let store = AclStore::open(dir.path().join("acls")).unwrap();
    let all = sample();
    let mut creations: Vec<AclCreation> = all.iter().map(AclBinding::to_creation).collect();
    creations.insert(
        1,
        all[0]
            .to_creation()
            .with_resource_pattern_type(PatternType::Match.code()),
    );
    creations.push(all[0].to_creation().with_resource_type(0));
    let response = create_acls_response(&store, &CreateAclsRequest::default().with_creations(creations), false);
    let result_codes: Vec<i16> = response.results.iter().map(|r| r.error_code).collect();
    assert_eq!(
        result_codes,
        [0, codes::INVALID_REQUEST, 0, 0, 0, 0, 0, codes::INVALID_REQUEST]
    );
    assert_eq!(store.len(), all.len());

    let described = describe_acls_response(&store, &AclBindingFilter::any().to_describe_request());
    assert_eq!(described.error_code, codes::NONE);
    let (bindings, unknown) = AclBinding::from_describe_response(&described);
    assert!(unknown.is_empty());
    assert_eq!(
        bindings.into_iter().collect::<BTreeSet<_>>(),
        all.iter().cloned().collect()
    );
    // Grouped by resource: TOPIC orders is one resource with one ACL,
    // GROUP orders another.
    assert_eq!(described.resources.len(), all.len());
    // UNKNOWN elements match nothing.
    let unknown_filter = AclBindingFilter::any()
        .to_describe_request()
        .with_pattern_type_filter(0);
    let described = describe_acls_response(&store, &unknown_filter);
    assert_eq!(described.error_code, codes::NONE);
    assert!(described.resources.is_empty());

    let request = DeleteAclsRequest::default().with_filters(vec![
        all[3].to_delete_filter(),
        AclBindingFilter::any().to_delete_filter().with_operation(0),
        AclBindingFilter {
            resource_type: ResourceType::Topic,
            principal: Some("User:alice".into()),
            ..AclBindingFilter::any()
        }
        .to_delete_filter(),
    ]);
    let response = delete_acls_response(&store, &request, false);
    let outcome: Vec<(i16, usize)> = response
        .filter_results
        .iter()
        .map(|r| (r.error_code, r.matching_acls.len()))
        .collect();
    assert_eq!(outcome, [(0, 1), (codes::INVALID_REQUEST, 0), (0, 2)]);
    assert_eq!(
        response.filter_results[0].matching_acls[0].resource_name.as_str(),
        "payments"
    );
    assert_eq!(store.len(), all.len() - 2);
}
